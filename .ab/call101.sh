#!/usr/bin/env bash
# call 101: decode tiles with deeper cp.async rings (2/3/4 stages: 1/2/3 tiles in flight) against
# split targets (blocks per SM 1/2/4): does a block's own depth beat more splits at small B·Hkv?
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $OUT/env.txt
timeout 500 python3 tools/bench_kvcache.py --grid 1x1,1x8,8x8,64x8 --S 1024,8192,32768,131072 \
   --layouts contiguous --no-host --tiles 16x64x4x2,16x64x4x3,16x64x4x4 --bps 1,2,4 \
   > $OUT/stages.txt 2>&1
echo "bench rc=$?"; cut -c1-40,41-400 $OUT/stages.txt | tail -20
