#!/usr/bin/env bash
# call 74 (issue 15): the TF32 forward kernels' tests, the 16-bit mma forward after the products
# refactor, and tools/bench_f32.py (precisions, tile ablation, errors) against torch's efficient.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/env.txt
timeout 200 python3 -m pytest -q -m gpu tests/test_tf32.py -n 12 -rfE -p no:cacheprovider > $OUT/test_tf32.log 2>&1; echo "tf32 tests rc=$?"; tail -4 $OUT/test_tf32.log
timeout 150 python3 -m pytest -q -m gpu tests/test_gpu_kernels.py -n 12 -rfE -p no:cacheprovider -k "(float16 or bfloat16) and mma_m and not wgmma and not dmma" > $OUT/test_mma.log 2>&1; echo "mma tests rc=$?"; tail -3 $OUT/test_mma.log
timeout 330 python3 tools/bench_f32.py --d 64 128 256 --T 2048 4096 8192 16384 --tiles --errors --jobs 12 > $OUT/bench_f32.txt 2>&1; echo "bench rc=$?"
grep -v "^#" $OUT/bench_f32.txt | awk '$1=="fwd" || $1=="err"' | sort -u | head -0
sed -n '/^# pass d T/,$p' $OUT/bench_f32.txt | head -150
grep "FAILED\|Error" $OUT/test_tf32.log | head -20
