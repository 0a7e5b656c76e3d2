#!/usr/bin/env bash
# Session 55's final call when device time is short: the whole GPU suite at the final commit (or
# TESTS, e.g. the decode tests), then
# tests/sanitize.py kv (compiled first), racecheck before memcheck (call 274 ran both on
# .ab/warp_race.py), each step cut to the time left before DEADLINE. Key results print last.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
mkdir -p $OUT
DEADLINE=${DEADLINE:-450}
lim() { local l=$((DEADLINE - SECONDS)); [ $l -gt $1 ] && l=$1; [ $l -lt 1 ] && l=1; echo $l; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
git log -1 --format='%H %s' 2>/dev/null | tee -a $OUT/gpu.txt
timeout $(lim 240) python3 -m pytest -q -m gpu ${TESTS:-tests} -rfE -p no:cacheprovider -n 16 > $OUT/tests.txt 2>&1; echo "tests rc=$? ${SECONDS}s"
timeout $(lim 60) python3 tests/sanitize.py kv > $OUT/sanitize_warm.txt 2>&1; echo "warm rc=$? ${SECONDS}s"
timeout $(lim 210) compute-sanitizer --tool racecheck --error-exitcode 1 python3 tests/sanitize.py kv > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$? ${SECONDS}s"
timeout $(lim 150) compute-sanitizer --tool memcheck --error-exitcode 1 python3 tests/sanitize.py kv > $OUT/memcheck.txt 2>&1; echo "memcheck rc=$? ${SECONDS}s"
echo "== results"; tail -1 $OUT/tests.txt; grep -E "^FAILED|^ERROR" $OUT/tests.txt | head -6 | cut -c1-200
tail -2 $OUT/sanitize_warm.txt; tail -1 $OUT/racecheck.txt; tail -1 $OUT/memcheck.txt
