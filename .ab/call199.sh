#!/usr/bin/env bash
# call 199 (v63b): the batched Q split with batches of 2 at d <= 64 (8 at d = 128): call 198
# found the all-at-once batch 5-7% slower for 'tf32' d = 64 causal at T >= 8192 (the mainloop's
# SASS scheduled differently). A/B d = 64 against main, then the x1 / x3 GPU tests.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 130 python3 tools/ab_speed.py --base $PWD/.ab/base --new $PWD \
  --dtypes float32:tf32,float32:highest --d 64 --T 2048,16384 --passes fwd --causal 0,1 \
  --rounds 2 --json $OUT/ab.json > $OUT/ab.txt 2>&1; echo "ab rc=$?" >> $OUT/side.txt
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu -n 12 tests/test_wgmma_f16x1.py \
  tests/test_wgmma_f16x3.py -rfE > $OUT/tests.txt 2>&1; echo "tests rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"; cat $OUT/side.txt; tail -2 $OUT/tests.txt; grep -E "FAILED|ERROR" $OUT/tests.txt | head
tail -10 $OUT/ab.txt
