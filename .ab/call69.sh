# call 69 (fourteenth session, final commit's code): the whole GPU suite
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH=$PWD
T0=$SECONDS
STEPS="tests" JOBS=14 LIMIT_TESTS=300 TAIL=3 bash tests/gpu_session.sh > $OUT/suite.txt 2>&1
echo "suite at $((SECONDS - T0)) s"; tail -4 $OUT/suite.txt; tail -3 $OUT/tests.log
