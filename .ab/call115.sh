#!/usr/bin/env bash
# call 115: compute-sanitizer memcheck and racecheck (tests/sanitize.py: every family's new
# kernels and attention_with_kvcache's swizzled one-launch kernels) at the session's final kernels
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
LIMIT_SANITIZE=75 STEPS="env sanitize" TAIL=4 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
echo "=================== SUMMARY"
cat $OUT/summary.txt; grep -E "ERROR SUMMARY|ok .*kv cache|RACECHECK SUMMARY" $OUT/sanitize.log | tail -8
