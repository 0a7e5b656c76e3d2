export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
STEPS="env tests" JOBS=12 LIMIT_TESTS=220 TAIL=4 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
cat $OUT/summary.txt; grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head -20
