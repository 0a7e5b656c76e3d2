#!/usr/bin/env bash
# call 111 (issue 14): small decode steps: time against forced split counts; ncu source view of
# the B·Hkv = 1, S = 1k step (stall samples per instruction)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 200 python3 .ab/small_splits.py > $OUT/small_splits.txt 2>&1; echo "splits rc=$?"
timeout 90 ncu --set full --import-source yes --warp-sampling-interval 0 -k regex:'mma_fwd' --launch-skip 2 --launch-count 1 -f -o $OUT/small \
  python3 .ab/small_one.py > $OUT/small_ncu.log 2>&1; echo "small rc=$?"
ncu -i $OUT/small.ncu-rep --page source --csv --print-source sass > $OUT/small_source.csv 2>&1
ncu -i $OUT/small.ncu-rep --page details > $OUT/small_details.txt 2>&1; rm -f $OUT/small.ncu-rep $OUT/small_ncu.log
gzip $OUT/small_source.csv
echo "=================== SUMMARY"
cat $OUT/small_splits.txt
grep -E "Duration|Registers Per|Elapsed Cycles|Local|Spill" $OUT/small_details.txt | head -8
