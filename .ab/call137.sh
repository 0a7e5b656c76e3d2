#!/usr/bin/env bash
# call 137 (branch tf32-bwd, never run on a GPU before): the float32 backward on TF32 tensor
# cores. Its GPU tests and the float32 backward tests (the default float32 backward is now the
# 3xTF32 pair), the two GPU mutants, then the backward's speed in each precision beside torch's
# efficient float32 backward. Prediction (NOTES v33): 'highest' 40-60 TFLOP/s (2-3x the CUDA
# cores' 17-21), 'tf32' 1.5-2x 'highest'.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 110 python3 -m pytest -q -m gpu -n 14 -p no:cacheprovider -rfE tests/test_tf32.py \
  tests/test_backward.py -k "backward and (tf32 or float32)" > $OUT/tests.txt 2>&1
echo "tests rc=$?"; tail -4 $OUT/tests.txt
timeout 60 python3 tools/mutants.py --gpu gpu_tf32_bwd_first_column gpu_tf32_bwd_one_product \
  > $OUT/mutants.txt 2>&1; echo "mutants rc=$?"
timeout 95 python3 tools/bench_f32.py --pass bwd --d 64 128 --T 4096 16384 --reps 3 --jobs 14 \
  > $OUT/bench_bwd.txt 2>&1; echo "bench rc=$?"
echo "=================== SUMMARY"; grep -E "passed|failed|error" $OUT/tests.txt | tail -3
tail -3 $OUT/mutants.txt; grep -A40 "^# pass" $OUT/bench_bwd.txt | head -30
