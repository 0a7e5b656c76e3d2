#!/usr/bin/env bash
# call 172 (main + x3 no turns): ncu --set full on the x3 forward (d = 128, 64) and backward pair
# (d = 64), with per-instruction stall samples (source page, SASS) for each kernel.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 .ab/x3_ncu.py > $OUT/warm.txt 2>&1; echo "warm rc=$?"
timeout 400 ncu --set full --import-source no -k regex:f16x3 --launch-count 4 -f -o $OUT/x3 \
  python3 .ab/x3_ncu.py > $OUT/ncu_run.txt 2>&1; echo "ncu rc=$?"
ncu -i $OUT/x3.ncu-rep --page details > $OUT/details.txt 2>&1
ncu -i $OUT/x3.ncu-rep --page source --csv --print-source sass > $OUT/source.csv 2>$OUT/source.err
gzip -f $OUT/source.csv; ls -la $OUT
grep -E "cuflash_" $OUT/details.txt | head
grep -E "^  [a-z_]+.*\(|Duration|Compute \(SM\) Throughput|Registers Per|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Ipc A|Executed Instructions  " $OUT/details.txt | head -40
