#!/usr/bin/env bash
# call 89 (NOTES v25): the CUDA-core kernels' per-tile sums. float32 error forward and backward at
# T = 16384 before (.ab/base) and after; the long-key tests (criterion with float16 underflow);
# A/B speed of float32 'ieee' forward and the float32 backward (CUDA cores).
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
echo "=== long-T float32, before"
PYTHONPATH=$PWD/.ab/base timeout 150 python3 .ab/f32_long_bwd.py --T 16384 > $OUT/long_bwd_base.txt 2>&1; echo "rc=$?"
echo "=== long-T float32, after"
PYTHONPATH=$PWD timeout 150 python3 .ab/f32_long_bwd.py --T 16384 > $OUT/long_bwd_new.txt 2>&1; echo "rc=$?"
PYTHONPATH=$PWD timeout 150 python3 -m pytest -q -m gpu tests/test_long_keys.py -n 14 -rfEs -p no:cacheprovider > $OUT/long_keys.log 2>&1; echo "long keys rc=$?"
tail -1 $OUT/long_keys.log; grep -h "^FAILED\|^ERROR" $OUT/long_keys.log | cut -c1-300 | head
PYTHONPATH=$PWD timeout 250 python3 tools/ab_speed.py --base .ab/base --new . --dtypes float32:ieee --T 4096,16384 --rounds 2 > $OUT/ab_f32.txt 2>&1; echo "ab rc=$?"
cat $OUT/long_bwd_base.txt; echo; cat $OUT/long_bwd_new.txt
tail -20 $OUT/ab_f32.txt
