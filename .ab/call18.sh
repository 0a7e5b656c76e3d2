export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
STEPS="env tests" JOBS=12 LIMIT_TESTS=200 TAIL=4 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
timeout 210 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tests/sanitize.py > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?" >> $OUT/san.txt
timeout 160 compute-sanitizer --tool racecheck --error-exitcode 1 python3 tests/sanitize.py > $OUT/racecheck.log 2>&1; echo "racecheck rc=$?" >> $OUT/san.txt
cat $OUT/summary.txt $OUT/san.txt; grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head -20; tail -3 $OUT/memcheck.log; tail -3 $OUT/racecheck.log
