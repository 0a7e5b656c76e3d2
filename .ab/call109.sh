#!/usr/bin/env bash
# call 109 (issue 14): does the mma kernels' padded shared-memory row (272 bytes for 256) make
# cp.async ask L2 for 1.5x the sectors? probe layouts cgpad / cgswz; ncu source view of a small
# split decode step (where its time goes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
echo "== probe"; timeout 150 python3 .ab/load_probe.py --reps 5 --only cg,cgz,cgpad,cgswz,bulk > $OUT/probe.txt 2>&1; echo "rc=$?"
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,lts__t_requests_srcunit_tex_op_read.sum
timeout 100 ncu --clock-control none -k regex:'probe_cg' --launch-count 3 --metrics $M \
  python3 .ab/load_probe.py --reps 1 --gb 2 --only cgz,cgpad,cgswz > $OUT/probe_ncu.txt 2>&1; echo "probe ncu rc=$?"
echo "== small step source view"
timeout 200 ncu --set full --import-source yes --sampling-interval 0 -k regex:'mma_fwd' --launch-skip 2 --launch-count 1 -f -o $OUT/small \
  python3 .ab/small_one.py > $OUT/small_ncu.log 2>&1; echo "small rc=$?"
ncu -i $OUT/small.ncu-rep --page source --csv --print-source sass > $OUT/small_source.csv 2>&1
ncu -i $OUT/small.ncu-rep --page details > $OUT/small_details.txt 2>&1
rm -f $OUT/small.ncu-rep
echo "=================== SUMMARY"
tail -7 $OUT/probe.txt
grep -E "probe_|gpu__time|dram__|lts__" $OUT/probe_ncu.txt | sed 's/  */ /g' | cut -c1-100
grep -E "Duration|Registers|Achieved Occ|Elapsed Cycles|SM Frequency" $OUT/small_details.txt | head -8
