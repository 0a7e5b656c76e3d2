#!/usr/bin/env bash
# call 202 (next session, v66): the 16-bit warp-specialized backward on one consumer warpgroup,
# two blocks a multiprocessor (TileConfig(64, 64, 8, s, 'wgmma'), d <= 64; opt-in by name).
# 1. its GPU tests (test_gpu_kernels' WGMMA_WS_BWD cases, deterministic and atomic dQ);
# 2. bench_fwd_tiles --pass bwd: the 8-warp tiles beside the default (64 x 128 x 12 x 2) and
# torch's cuDNN / FlashAttention-2 in one run, d = 64, float16 / bfloat16, T 2048 / 4096 / 16384.
# Prediction (NOTES v66): 8-warp / default +5-10% at T = 2048 (causal the most), +2-5% at 4096,
# -3..+2% at 16384; against cuDNN from 0.80-0.81 to 0.84-0.89 at d = 64.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 12 tests/test_gpu_kernels.py \
  -k "w8" -rfE > $OUT/tests.txt 2>&1; echo "tests rc=$?" >> $OUT/side.txt
timeout 300 python3 tools/bench_fwd_tiles.py --pass bwd --d 64 --T 2048,4096,16384 \
  --tiles default,64x64x8x2,64x64x8x3,default:atomic,64x64x8x2:atomic --rounds 3 --reps 5 \
  --json $OUT/bwd.json > $OUT/bwd.txt 2>&1; echo "bench rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"; cat $OUT/side.txt; tail -2 $OUT/tests.txt
grep -E "FAILED|ERROR" $OUT/tests.txt | head; tail -30 $OUT/bwd.txt
