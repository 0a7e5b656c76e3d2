#!/usr/bin/env bash
# call 183 (session 35; NOTES v58): staging that costs less, on the working tree
# (.ab/v58_staging.patch applied): the whole GPU suite first, then the staging kernels'
# bandwidth and whole calls (.ab/stage_time.py). Call 184: the A/B against 82252dd.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=12 LIMIT_TESTS=330 TAIL=3 OUT=/tmp/gs bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "^(FAILED|ERROR)" /tmp/gs/tests.log > $OUT/failures.txt; tail -3 /tmp/gs/tests.log >> $OUT/failures.txt
timeout 100 python3 .ab/stage_time.py > $OUT/stage_time.txt 2>&1; echo "stage rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"
cat /tmp/gs/summary.txt $OUT/side.txt; head -30 $OUT/failures.txt
grep -E "stage|copy" $OUT/stage_time.txt
