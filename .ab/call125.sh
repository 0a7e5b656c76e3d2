#!/usr/bin/env bash
# call 125 (v30, the session's final commit): the whole GPU suite, the GPU mutants of v30, then
# the forward against torch's cuDNN and FlashAttention-2 backends in one run (issue 13's table).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=14 LIMIT_TESTS=280 TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
timeout 120 python3 tools/mutants.py --gpu gpu_tma_kv_head gpu_tma_maps_never_made > $OUT/mutants.txt 2>&1; echo "mutants rc=$?"
timeout 190 python3 tools/bench_fwd_tiles.py --tiles default --T 2048,4096,8192,16384 --rounds 2 --reps 5 \
  --json $OUT/fwd_vs_torch.json > $OUT/fwd_vs_torch.txt 2>&1; echo "bench rc=$?"
echo "=================== SUMMARY"
cat $OUT/summary.txt; tail -3 $OUT/tests.log; tail -4 $OUT/mutants.txt
tail -40 $OUT/fwd_vs_torch.txt
