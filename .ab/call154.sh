#!/usr/bin/env bash
# call 154 (next session, branch wgmma-desc, NOTES v41): every wgmma kernel's SASS changed, so the
# whole GPU suite first, then the TF32 forward against main (.ab/base = git archive main cuflash
# kernels_cu setup.cfg tools, carried). call 155: tools/ab_speed.py --passes fwd,bwd (16-bit).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=14 LIMIT_TESTS=320 TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
echo "suite rc=$?"; cat $OUT/summary.txt; tail -2 $OUT/tests.log
(cd .ab/base && PYTHONPATH=$PWD timeout 150 python3 tools/bench_f32.py --wgmma --d 64 128 --T 1024 4096 16384 \
  --reps 3 --jobs 14 --no-torch > $OUT/bench_base.txt 2>&1); echo "base rc=$?"
timeout 150 python3 tools/bench_f32.py --wgmma --d 64 128 --T 1024 4096 16384 --reps 3 --jobs 14 \
  --no-torch > $OUT/bench_new.txt 2>&1; echo "new rc=$?"
paste <(grep -E "^fwd .* (wgmma_tf32|mma_tf32) " $OUT/bench_base.txt) <(grep -E "^fwd .* (wgmma_tf32|mma_tf32) " $OUT/bench_new.txt) \
  | awk '{printf "%s %s %s %s base %s new %s new/base %.3f\n", $2, $3, $4, $5, $6, $13, $13 / $6}'
