# call 72 (fourteenth session, final commit): the whole GPU suite, then issue 12's three speed
# parts again at this commit
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH=$PWD
T0=$SECONDS
STEPS="tests" JOBS=14 LIMIT_TESTS=300 TAIL=3 bash tests/gpu_session.sh > $OUT/suite.txt 2>&1
echo "suite at $((SECONDS - T0)) s"; tail -3 $OUT/tests.log
L=$((380 - (SECONDS - T0)))
timeout $L python tools/bench_issue12.py --parts varlen,gqa,strided --rounds 5 --min-ms 20 > $OUT/issue12.txt 2>&1; echo "issue12 rc=$? at $((SECONDS - T0)) s"
grep -v "^ *$" $OUT/issue12.txt | tail -42
