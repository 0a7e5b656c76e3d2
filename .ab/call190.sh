#!/usr/bin/env bash
# call 190 (session 38): main (3006f64+) + .ab/x1_fwd_n128.patch applied here:
#  1. the whole GPU suite (failures and their E-lines kept);
#  2. bench_f32 --x3 forward at d 64 (the x1 128-key tiles by name) and 128, T 2048 / 16384;
#  3. bench_f32 --x3 backward, d 64 / 128, T 2048 / 16384 (issue 15's 'tf32' 5x, 'highest' 2.5x).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
git apply .ab/x1_fwd_n128.patch && echo "n128 patch applied" >> $OUT/side.txt
STEPS="env tests" JOBS=12 LIMIT_TESTS=290 TAIL=3 OUT=/tmp/gs bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "^(FAILED|ERROR)" /tmp/gs/tests.log > $OUT/failures.txt; tail -3 /tmp/gs/tests.log >> $OUT/failures.txt
grep -E "^E |^_____" /tmp/gs/tests.log | head -300 > $OUT/errors.txt
timeout 70 python3 tools/bench_f32.py --x3 --d 64 128 --T 2048 16384 --reps 3 --jobs 14 \
  > $OUT/bench_fwd.txt 2>&1; echo "bench fwd rc=$?" >> $OUT/side.txt
timeout 90 python3 tools/bench_f32.py --pass bwd --x3 --d 64 128 --T 2048 16384 --reps 3 \
  --jobs 14 > $OUT/bench_bwd.txt 2>&1; echo "bench bwd rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"; cat /tmp/gs/summary.txt $OUT/side.txt; head -20 $OUT/failures.txt
grep -E "^E " $OUT/errors.txt | head -12
grep -hE "^(fwd|bwd) " $OUT/bench_fwd.txt $OUT/bench_bwd.txt | \
  grep -E " (tf32|highest|torch_eff|wgmma_f16x1\S*) " | sort -u | head -60
