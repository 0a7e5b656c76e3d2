#!/usr/bin/env bash
# call 131 (session 24): evidence for issues 13 and 11, nothing changed: ncu's full set of
# cuflash's kernels beside cuDNN's (.ab/ncu131.py: forward d=64 and d=128, backward d=64,
# fp16, T=8192; the windowed forward at T=32k), a digest per kernel, the SASS source page.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 400 ncu --profile-from-start off --set full -o /tmp/r131 python3 .ab/ncu131.py > $OUT/ncu_run.txt 2>&1
echo "ncu rc=$?"; tail -3 $OUT/ncu_run.txt
ncu -i /tmp/r131.ncu-rep --print-details all > /tmp/details.txt 2>&1; gzip -c /tmp/details.txt > $OUT/details.txt.gz
ncu -i /tmp/r131.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $OUT/source.csv.gz
grep -E "^  [A-Za-z_].*\(|^    (Duration|Registers Per Thread|Dynamic Shared Memory Per Block|Block Size|Grid Size|Issue Slots Busy|No Eligible|Warp Cycles Per Issued Instruction|Achieved Occupancy|DRAM Throughput|L2 Hit Rate|Compute \(SM\) Throughput|Executed Instructions  |SM: Pipe Tensor Cycles Active|Theoretical Occupancy) " /tmp/details.txt \
  | sed -E 's/  +/ /g' | cut -c1-160 > $OUT/digest.txt
ls -la $OUT; echo "=================== DIGEST"; cat $OUT/digest.txt
