#!/usr/bin/env bash
# call 218 (next session, v72 prepared in session 41): .ab/f16s_d128.patch applied (the f16s dQ
# kernel stages its float32 rows through the warp's Q rows in two column halves: no spill at
# d = 128; 'wgmma_f16s' the default 'tf32' backward up to d = 128). GPU tests of the f16s, x1
# and tf32 files, then .ab/v71_bench.py at d = 64 and 128 (d = 64 must not move: its dQ store
# changed too). Prediction: NOTES v72.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
git apply .ab/f16s_d128.patch || { echo "patch does not apply"; exit 1; }
timeout 300 python3 -m pytest -q -p no:cacheprovider -n 16 -m gpu tests/test_f16_scaled.py \
  tests/test_wgmma_f16x1.py tests/test_tf32.py > $OUT/tests.txt 2>&1
echo "tests rc=$?"; grep -E "passed|failed" $OUT/tests.txt | tail -2; grep -E "^FAILED" $OUT/tests.txt | head -20
timeout 200 python3 .ab/v71_bench.py --d 64 128 --T 2048 4096 16384 > $OUT/v72_bench.txt 2>&1
echo "bench rc=$?"; sed -n '/^# d T/,$p' $OUT/v72_bench.txt | grep -v " f16s "; grep "^# 20" $OUT/v72_bench.txt
