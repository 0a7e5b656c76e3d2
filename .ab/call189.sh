#!/usr/bin/env bash
# call 189 (the budget's last): main + .ab/x1_fwd_n128.patch; the x1 / x3 / staging / errors GPU
# tests (the 128-key x1 tiles, the float64 softcap check), then the fast GPU tier as time allows.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
git apply .ab/x1_fwd_n128.patch && echo "n128 patch applied" >> $OUT/side.txt
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu -n 12 tests/test_wgmma_f16x1.py \
  tests/test_f16x3_stage.py tests/test_errors.py tests/test_wgmma_f16x3.py -rfE > $OUT/x1.txt 2>&1
echo "x1 rc=$?" >> $OUT/side.txt
timeout 100 python3 -m pytest -q -p no:cacheprovider -m "gpu and not slow" -n 12 tests -rfE \
  > $OUT/fast.txt 2>&1; echo "fast rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"; cat $OUT/side.txt
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/x1.txt | head -15
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/fast.txt | head -15
