# call 58 (twelfth session, branch ws-backward, after call 57): compute-sanitizer on the float16
# d = 128 cases of tests/sanitize.py (the ws forward with the ws backward among them).
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH=$PWD
T0=$SECONDS
timeout 120 python tests/sanitize.py case float16 128 > $OUT/sanitize_warm.txt 2>&1; echo "warm rc=$?"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 1 python tests/sanitize.py case float16 128 > $OUT/memcheck.txt 2>&1; echo "memcheck rc=$?"
timeout 250 compute-sanitizer --tool racecheck --error-exitcode 1 python tests/sanitize.py case float16 128 > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$?"
echo "end at $((SECONDS - T0)) s"; grep -E "^ok|SUMMARY" $OUT/memcheck.txt $OUT/racecheck.txt | tail -12
