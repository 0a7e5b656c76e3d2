#!/usr/bin/env bash
# Session 56, call 279: the tree = main + .ab/merge104.patch + .ab/chunks_helper.patch.
# (1) env; (2) the whole GPU suite; (3) .ab/merge_race.py (v104's lone merge) warm, racecheck,
# memcheck; (4) tests/sanitize.py kv under memcheck (the chunk copier changes the key-split decode
# kernels). Each step cut to the time left before DEADLINE; key results last.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT
DEADLINE=${DEADLINE:-570}
lim() { local l=$((DEADLINE - SECONDS)); [ $l -gt $1 ] && l=$1; [ $l -lt 1 ] && l=1; echo $l; }
LIMIT_TESTS=$(lim 340) STEPS="env tests" bash tests/gpu_session.sh > $OUT/gs.txt 2>&1; echo "suite done ${SECONDS}s"
timeout $(lim 40) python3 .ab/merge_race.py > $OUT/race_warm.txt 2>&1; echo "warm rc=$? ${SECONDS}s"
timeout $(lim 60) compute-sanitizer --tool racecheck --error-exitcode 1 python3 .ab/merge_race.py > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$? ${SECONDS}s"
timeout $(lim 40) compute-sanitizer --tool memcheck --error-exitcode 1 python3 .ab/merge_race.py > $OUT/memcheck.txt 2>&1; echo "memcheck rc=$? ${SECONDS}s"
timeout $(lim 100) compute-sanitizer --tool memcheck --error-exitcode 1 python3 tests/sanitize.py kv > $OUT/kv_memcheck.txt 2>&1; echo "kv memcheck rc=$? ${SECONDS}s"
echo "== results"; grep -A3 "=== summary" $OUT/gs.txt; grep -E "passed|failed" $OUT/gs.txt | tail -2
grep -E "^FAILED|^ERROR" $OUT/gs.txt | head -8 | cut -c1-200
head -3 $OUT/gs.txt | cut -c1-150; grep -m2 -E "H100|H200" $OUT/gs.txt
tail -2 $OUT/race_warm.txt; tail -1 $OUT/racecheck.txt; tail -1 $OUT/memcheck.txt; tail -1 $OUT/kv_memcheck.txt
