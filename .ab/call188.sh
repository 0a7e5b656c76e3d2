#!/usr/bin/env bash
# call 188: main + v59 (x1 forward default at 97 <= d <= 128) + v61 (x1 forward without lo tiles,
# 3 stages, 128-key tiles at d <= 64; the staging kernel of 128-key V tiles); v60 dropped:
#  - the whole GPU suite (its log's failures kept);
#  - the float64 softcap / scale 1e39 test that failed in call 185, verbose;
#  - bench_f32 --x3 forward: every precision's default, the x1 tiles by name, torch efficient.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=12 LIMIT_TESTS=300 TAIL=3 OUT=/tmp/gs bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "^(FAILED|ERROR)" /tmp/gs/tests.log > $OUT/failures.txt; tail -3 /tmp/gs/tests.log >> $OUT/failures.txt
grep -E "^E |^_____" /tmp/gs/tests.log | head -300 > $OUT/errors.txt
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_errors.py -k score_constants \
  -x -vv > $OUT/err64.txt 2>&1; echo "err64 rc=$?" >> $OUT/side.txt
timeout 200 python3 tools/bench_f32.py --x3 --d 64 128 --T 2048 16384 --reps 3 --jobs 14 \
  > $OUT/bench_fwd.txt 2>&1; echo "bench fwd rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"; cat /tmp/gs/summary.txt $OUT/side.txt; head -20 $OUT/failures.txt
grep -E "^E " $OUT/err64.txt | head -8
tail -40 $OUT/bench_fwd.txt
