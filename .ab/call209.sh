#!/usr/bin/env bash
# call 209 (next session, v70): the prototype of 'tf32' on the 16-bit kernels with per-tensor
# power-of-two float16 copies (.ab/via16_gpu.py: forward and backward beside 'tf32' today and
# torch's efficient float32, bench_f32's shapes; then accuracy against the oracle). Prediction:
# NOTES v70. About 4 minutes.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 400 python3 .ab/via16_gpu.py --d 64 128 --T 2048 4096 16384 --reps 5 > $OUT/via16.txt 2>&1
echo "via16 rc=$?"; grep -E "^#|^bwd|^fwd" $OUT/via16.txt; grep "^acc" $OUT/via16.txt | sort -k12 -g | tail -5
