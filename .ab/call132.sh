#!/usr/bin/env bash
# call 132 (session 24): the forward's K/V ring depth under the copy-engine producer (v30), a
# measurement only: cuDNN's forward holds 134 KB of shared memory at d = 64 and 232 KB at d = 128
# (ncu, call 131) against our 2-stage 83 / 165 KB. 128x128x12 with 3 (and at d = 64 4) stages
# against the default 2, beside cuDNN and FA2, fp16, T = 4096 and 16384, causal and not.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 200 python3 tools/bench_fwd_tiles.py --tiles default,128x128x12x3,128x128x12x4 --d 64 --dtypes float16 \
  --T 4096,16384 --rounds 2 --reps 5 --json $OUT/d64.json > $OUT/d64.txt 2>&1; echo "d64 rc=$?"
timeout 150 python3 tools/bench_fwd_tiles.py --tiles default,128x128x12x3 --d 128 --dtypes float16 \
  --T 4096,16384 --rounds 2 --reps 5 --json $OUT/d128.json > $OUT/d128.txt 2>&1; echo "d128 rc=$?"
echo "=================== SUMMARY"; tail -6 $OUT/d64.txt; tail -6 $OUT/d128.txt
