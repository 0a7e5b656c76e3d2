#!/usr/bin/env bash
# call 178 (session 34, NOTES v56): 'tf32' as one float16 product (kernel='wgmma_f16x1') and the
# d = 128 x3 backward as 'highest''s default, on the tree to be committed. One call:
#  - issue 15's ratios against torch in one run: bench_f32 --x3 forward at T 2048 / 8192 (the
#    'highest' bar's other lengths; x1 forward beside wgmma_tf32), backward at T 2048 / 4096 /
#    16384 (x3, x1, mma_tf32, mma_highest, torch);
#  - the whole GPU suite (x1's tests among them) and, beside it, the GPU mutant
#    gpu_f16x1_chain_not_from_zero.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 110 python3 tools/bench_f32.py --x3 --d 64 128 --T 2048 8192 --reps 3 --jobs 14 \
  > $OUT/bench_fwd.txt 2>&1; echo "bench fwd rc=$?" >> $OUT/side.txt
timeout 140 python3 tools/bench_f32.py --pass bwd --x3 --d 64 128 --T 2048 4096 16384 --reps 3 \
  --jobs 14 > $OUT/bench_bwd.txt 2>&1; echo "bench bwd rc=$?" >> $OUT/side.txt
(timeout 150 python3 tools/mutants.py --gpu gpu_f16x1_chain_not_from_zero > /tmp/m.txt 2>&1
 echo "mutant rc=$? $(tail -1 /tmp/m.txt)") >> $OUT/side.txt 2>&1 &
STEPS="env tests" JOBS=12 LIMIT_TESTS=310 TAIL=3 OUT=/tmp/gs bash tests/gpu_session.sh > $OUT/session.txt 2>&1
wait
grep -E "^(FAILED|ERROR)" /tmp/gs/tests.log > $OUT/failures.txt; tail -3 /tmp/gs/tests.log >> $OUT/failures.txt
cp /tmp/gs/tests.log $OUT/tests.log 2>/dev/null
echo "=================== SUMMARY"
cat /tmp/gs/summary.txt $OUT/side.txt; head -30 $OUT/failures.txt
grep -hE "^(fwd|bwd) " $OUT/bench_fwd.txt $OUT/bench_bwd.txt | grep -E "f16x|torch_eff|tf32|highest" | sort -u | head -120
