#!/usr/bin/env bash
# call 257 (session 50): float64's and float32's GPU tests at v90's final commit
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout ${LIMIT:-70} python3 -m pytest -q -m gpu -p no:cacheprovider -n 16 -rfE tests/test_gpu_kernels.py \
  tests/test_backward.py tests/test_forward.py tests/test_tf32.py tests/test_layout_families.py \
  tests/test_long_keys.py tests/test_varlen.py tests/test_split_kv.py -k "float64 or dmma or tf32 or float32" > $OUT/tests.txt 2>&1
echo "tests rc=$? at ${SECONDS}s"; tail -4 $OUT/tests.txt
