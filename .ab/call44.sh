# review commit: the whole GPU suite
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
STEPS="tests" JOBS=14 LIMIT_TESTS=200 TAIL=3 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head
