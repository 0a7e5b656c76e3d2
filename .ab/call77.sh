#!/usr/bin/env bash
# call 77: the whole GPU suite with float32's default 'highest' (3xTF32), and the TF32 GPU mutants
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=14 LIMIT_TESTS=330 TAIL=3 bash tests/gpu_session.sh > $OUT/session.log 2>&1
tail -8 $OUT/session.log
grep -h "^FAILED\|^ERROR" $OUT/tests.log | head -30
timeout 200 python3 tools/mutants.py --gpu gpu_tf32x3_one_product gpu_tf32x3_chained_sums > $OUT/mutants.log 2>&1; echo "mutants rc=$?"; tail -4 $OUT/mutants.log
