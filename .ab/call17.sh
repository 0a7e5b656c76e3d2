export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 230 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tests/sanitize.py > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?" >> $OUT/san.txt
timeout 200 compute-sanitizer --tool racecheck --error-exitcode 1 python3 tests/sanitize.py > $OUT/racecheck.log 2>&1; echo "racecheck rc=$?" >> $OUT/san.txt
cat $OUT/san.txt; tail -3 $OUT/memcheck.log; tail -3 $OUT/racecheck.log
