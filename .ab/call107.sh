#!/usr/bin/env bash
# call 107 (issue 14): (1) load-instruction probe: cp.async.cg/ca/L2::256B, TMA bulk, ldg against
# the read kernel, timed and under ncu (L2 sectors); (2) ncu source page of the decode kernel;
# (3) kernel durations of small decode steps vs read kernel vs cuDNN; (4) min-tiles sweep
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/env.log 2>&1
python3 -c "import cupy, torch; print(cupy.__version__, torch.__version__)" >> $OUT/env.log 2>&1
echo "== probe"; timeout 150 python3 .ab/load_probe.py --reps 5 > $OUT/probe.txt 2>&1; echo "rc=$?"
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,lts__t_sectors_srcunit_tex.sum,lts__t_requests_srcunit_tex_op_read.sum
timeout 150 ncu --clock-control none -k regex:'probe_|read_ceiling' --launch-count 7 --metrics $M \
  python3 .ab/load_probe.py --reps 1 --gb 2 > $OUT/probe_ncu.txt 2>&1; echo "probe ncu rc=$?"
timeout 60 ncu --clock-control none -k regex:'probe_cg$|read_ceiling' --launch-count 2 --metrics lts__t_sectors_srcunit_ltcfabric.sum,lts__t_sectors_srcunit_ltcfabric_lookup_hit.sum \
  python3 .ab/load_probe.py --reps 1 --gb 2 --only cg > $OUT/probe_fabric.txt 2>&1; echo "fabric rc=$?"
echo "== small steps"
timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
  python3 .ab/small_ncu.py > $OUT/small_ncu.csv 2>&1; echo "small rc=$?"
echo "== decode source page"
timeout 200 ncu --set full --import-source yes -k regex:'mma_fwd' --launch-skip 1 --launch-count 1 -f -o $OUT/dec \
  python3 .ab/decode_ncu.py > $OUT/dec_ncu.log 2>&1; echo "dec rc=$?"
ncu -i $OUT/dec.ncu-rep --page source --csv --print-source sass > $OUT/dec_source.csv 2>&1; echo "src rc=$?"
ncu -i $OUT/dec.ncu-rep --page details > $OUT/dec_details.txt 2>&1
ls -la $OUT/dec.ncu-rep; [ $(stat -c %s $OUT/dec.ncu-rep) -gt 30000000 ] && rm $OUT/dec.ncu-rep
echo "== min-tiles sweep"
timeout 150 python3 tools/bench_kvcache.py --grid 1x1,1x8,4x8 --S 1024,8192 --layouts contiguous \
  --min-tiles 1,2 --no-host > $OUT/mintiles.txt 2>&1; echo "bench rc=$?"
echo "=================== SUMMARY"
cat $OUT/probe.txt | tail -9
grep -E "probe_|read_ceiling|gpu__time|dram__|lts__" $OUT/probe_ncu.txt | sed 's/  */ /g' | cut -c1-110
grep -E "probe_|read_ceiling|lts__" $OUT/probe_fabric.txt | sed 's/  */ /g' | cut -c1-110 | tail -8
python3 - <<'PY'
import csv, os, re
p = os.environ.get("OUT", "/tmp/out") + "/small_ncu.csv"
rows = [l for l in open(p) if l.startswith('"')]
for r in csv.reader(rows):
    if len(r) > 10 and r[-3] == "gpu__time_duration.sum":
        print(r[0], r[4][:60], r[-1], r[-2])
PY
head -5 $OUT/dec_source.csv | cut -c1-300
tail -12 $OUT/mintiles.txt
