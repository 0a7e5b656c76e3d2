#!/usr/bin/env bash
# call 127 (next session, on branch tma-bwd: `git checkout tma-bwd`, rebased on main if main
# moved; .ab/base = main's tree: `git archive main cuflash kernels_cu setup.cfg | tar -x -C .ab/base`):
# the whole GPU suite on the branch, then the backward A/B over every cell (d = 64 causal lost
# 1.5-1.8% in call 126), then the backward against torch's cuDNN and FA2.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=14 LIMIT_TESTS=280 TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
timeout 200 python3 tools/ab_speed.py --base .ab/base --new . --passes bwd --T 2048,8192,16384 --rounds 2 \
  > $OUT/ab_bwd.txt 2>&1; echo "ab rc=$?"
timeout 150 python3 tools/bench_fwd_tiles.py --pass bwd --tiles default --T 4096,16384 --rounds 2 --reps 5 \
  --json $OUT/bwd_vs_torch.json > $OUT/bwd_vs_torch.txt 2>&1; echo "bench rc=$?"
echo "=================== SUMMARY"
cat $OUT/summary.txt; tail -3 $OUT/tests.log; tail -30 $OUT/ab_bwd.txt; tail -20 $OUT/bwd_vs_torch.txt
