#!/usr/bin/env bash
# call 188: main (v59 and v61 merged) + .ab/x1_fwd_n128.patch (the x1 forward's 128-key tiles at
# d <= 64 and their staging kernel), applied here first:
#  - the whole GPU suite (its log's failures kept);
#  - bench_f32 --x3 forward: every precision's default, the x1 tiles by name, torch efficient.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
git apply .ab/x1_fwd_n128.patch && echo "n128 patch applied" >> $OUT/side.txt
STEPS="env tests" JOBS=12 LIMIT_TESTS=280 TAIL=3 OUT=/tmp/gs bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "^(FAILED|ERROR)" /tmp/gs/tests.log > $OUT/failures.txt; tail -3 /tmp/gs/tests.log >> $OUT/failures.txt
grep -E "^E |^_____" /tmp/gs/tests.log | head -300 > $OUT/errors.txt
timeout 80 python3 tools/bench_f32.py --x3 --d 64 --T 2048 16384 --reps 3 --jobs 14 \
  > $OUT/bench_fwd.txt 2>&1; echo "bench fwd rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"; cat /tmp/gs/summary.txt $OUT/side.txt; head -20 $OUT/failures.txt
grep -E "^E " $OUT/errors.txt | head -20
tail -40 $OUT/bench_fwd.txt
