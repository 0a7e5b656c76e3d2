#!/usr/bin/env bash
# call 256 (session 50), v90: the GPU tests of float64's and float32's kernels at this tree; the
# dmma backward A/B against .ab/base (main before v90: carry [".ab/base"]) and the tf32x3 tiles
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-300}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
timeout 110 python3 -m pytest -q -m gpu -p no:cacheprovider -n 16 -rfE tests/test_gpu_kernels.py \
  tests/test_backward.py tests/test_forward.py tests/test_tf32.py tests/test_layout_families.py \
  tests/test_long_keys.py -k "float64 or dmma or tf32 or float32" > $OUT/tests.txt 2>&1
echo "tests rc=$? at ${SECONDS}s"; tail -4 $OUT/tests.txt
for r in 1 2; do
  for tree in .ab/base .; do
    a=""; [ "$tree" = "." ] && a=tf32
    t=$((L - SECONDS - 5)); [ $t -lt 20 ] && break
    timeout $t python3 .ab/v90_bench.py $tree $a | grep RESULT | sed "s|^|$r $tree |" | tee -a $OUT/bench.txt
  done
done
echo "elapsed ${SECONDS}s"
