#!/usr/bin/env bash
# call 251 (session 49, the last ~200 s of device time): after call 250 found the v85 tree's
# generic lambdas refused by the device's NVRTC 13.0. Tree: v84 + v85 + v86 + v87 with the
# functors. tests: the wgmma float16 backward against the oracle (-x); ab: the backward, main's
# kernels (.ab/base) against this tree, float16, d = 128 and 64, T = 8192, one round.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-200}
timeout $((L * 2 / 5)) python3 -m pytest -q -m gpu -p no:cacheprovider -n 16 -x -rfE \
  tests/test_backward.py tests/test_gpu_kernels.py -k "wgmma and float16 and not tf32" > $OUT/tests.txt 2>&1
echo "tests rc=$? at ${SECONDS}s"; tail -4 $OUT/tests.txt
t=$((L - SECONDS - 5))
[ $t -gt 30 ] && timeout $t python3 tools/ab_speed.py --base .ab/base --new . --dtypes float16 \
  --d 128,64 --T 8192 --passes bwd --rounds 1 > $OUT/ab.txt 2>&1
echo "ab rc=$? at ${SECONDS}s"; grep -v "^round" $OUT/ab.txt | tail -12
