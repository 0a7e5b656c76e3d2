#!/usr/bin/env bash
# call 126 (branch tma-bwd): the warp-specialized dQ kernel's loads by the copy engine. Backward
# GPU tests, then backward A/B against .ab/base (main, 004dee5).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 170 python3 -m pytest -q -m gpu -n 14 -p no:cacheprovider -rfE tests/test_backward.py \
  tests/test_gpu_kernels.py tests/test_gqa.py tests/test_varlen.py tests/test_views.py > $OUT/tests.txt 2>&1
echo "tests rc=$?"; tail -3 $OUT/tests.txt
timeout 110 python3 tools/ab_speed.py --base .ab/base --new . --passes bwd --T 4096,16384 --dtypes float16 \
  --rounds 2 > $OUT/ab_bwd.txt 2>&1; echo "ab rc=$?"
echo "=================== SUMMARY"
grep -E "passed|failed" $OUT/tests.txt | tail -3; grep -E "^FAILED" $OUT/tests.txt | head
tail -12 $OUT/ab_bwd.txt
