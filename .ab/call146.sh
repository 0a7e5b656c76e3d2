#!/usr/bin/env bash
# call 146 (next session, after call 145 passes; branch wgmma-tf32): the whole GPU suite on the
# branch (the merge's condition: the wgmma-tf32 kernels, the staging kernel and the 16-bit
# forwards whose SASS wgmma_tile_probs changed), then the 'tf32' family's backward tile ablation
# that session 26 left (its defaults are still call 138's; 'highest' took (64, 64, 8, 2) at
# d = 64 and one stage at d = 128 from its own). Prediction for 'tf32': the same tiles win as for
# 'highest', by less (one product per pair leaves the hand-over a larger share: v33).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=14 LIMIT_TESTS=320 TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
timeout 150 python3 tools/bench_f32.py --pass bwd --d 64 128 --T 4096 --causal no --reps 3 --jobs 14 \
  --tiles --families tf32 --no-torch > $OUT/tiles_bwd_tf32.txt 2>&1; echo "tiles rc=$?"
echo "=================== SUMMARY"; cat $OUT/summary.txt; tail -3 $OUT/tests.log
grep -E "tf32|highest" $OUT/tiles_bwd_tf32.txt | grep -v "^#" | tail -14
