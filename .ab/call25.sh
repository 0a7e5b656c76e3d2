# sanitizers on the decode path (kv cases first), after sanitize.py's fix
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 python tests/sanitize.py kv > $OUT/memcheck_kv.txt 2>&1; echo "memcheck rc=$?"; grep "^ok" $OUT/memcheck_kv.txt | wc -l; tail -2 $OUT/memcheck_kv.txt
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 1 python tests/sanitize.py kv > $OUT/racecheck_kv.txt 2>&1; echo "racecheck rc=$?"; grep "^ok" $OUT/racecheck_kv.txt | wc -l; tail -2 $OUT/racecheck_kv.txt
