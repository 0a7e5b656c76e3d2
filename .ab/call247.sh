#!/usr/bin/env bash
# call 247 (session 47; the last ~200 s of device time): v84's running-max tests (the rescale and
# the redo paths at d = 128, the control at d = 64), then tools/ab_speed.py fwd at d = 128, one
# round, against main's kernels (.ab/base = a38030c; carry it).
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-170}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
PYTHONPATH=$PWD timeout 75 python3 -m pytest -q -m gpu -p no:cacheprovider -n 16 -rfE \
  tests/test_forward.py -k "running_max" > $OUT/tests.txt 2>&1
echo "tests rc=$? at ${SECONDS}s"; tail -8 $OUT/tests.txt
PYTHONPATH=$PWD timeout $((L - SECONDS - 3)) python3 tools/ab_speed.py --base .ab/base --new . \
  --dtypes float16,bfloat16 --d 128 --T 4096,16384 --passes fwd --rounds 1 > $OUT/ab.txt 2>&1
echo "ab rc=$? at ${SECONDS}s"; grep -v "^round" $OUT/ab.txt | tail -12
echo "elapsed ${SECONDS}s"
