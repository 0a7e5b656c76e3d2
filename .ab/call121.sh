#!/usr/bin/env bash
# call 121: the sanitizer over the decode path with 256 forced splits (v29b merge): compute-sanitizer memcheck and racecheck over the decode path
# alone (tests/sanitize.py kv: the swizzled KV-cache kernels of v28, the append, split-KV's merge,
# the key-split, TF32 and float64 tensor-core cases), which call 115 did not reach
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
SANITIZE_ARGS=kv LIMIT_SANITIZE=150 STEPS="env sanitize" TAIL=4 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
echo "=================== SUMMARY"
cat $OUT/summary.txt; grep -E "^ok|ERROR SUMMARY|RACECHECK SUMMARY" $OUT/sanitize.log | tail -12
