#!/usr/bin/env bash
# call 167 (NOTES v48, the session's final code): the whole GPU suite at 0cb5ecd's kernels and
# defaults ('highest''s x3 kernels from 512 keys, 'tf32''s wide tile from 4096 keys at
# 128 < d <= 256), nothing else (the device time left: ~370 s).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=14 LIMIT_TESTS=${LIMIT_TESTS:-290} TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
echo "=================== SUMMARY"
cat $OUT/summary.txt; grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -20; tail -1 $OUT/tests.log
