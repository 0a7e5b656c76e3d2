#!/usr/bin/env bash
# call 210 (session 41, v71): the new 'wgmma_f16s' tests and the tf32/x1/backward GPU tests
# (every backward kernel now reads dq_scale, dk_scale, dv_scale), then .ab/v71_bench.py.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 330 python3 -m pytest -q -p no:cacheprovider -n 16 -m gpu tests/test_f16_scaled.py \
  tests/test_wgmma_f16x1.py tests/test_tf32.py tests/test_backward.py tests/test_gqa.py \
  > $OUT/tests.txt 2>&1
echo "tests rc=$?"; grep -E "passed|failed" $OUT/tests.txt | tail -2; grep -E "^FAILED|Error" $OUT/tests.txt | head -20
timeout 200 python3 .ab/v71_bench.py --d 64 128 --T 2048 4096 16384 > $OUT/v71_bench.txt 2>&1
echo "bench rc=$?"; sed -n '/^# d T/,$p' $OUT/v71_bench.txt | grep -v " f16s " ; grep "^#" $OUT/v71_bench.txt | head -2
