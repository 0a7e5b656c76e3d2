#!/usr/bin/env bash
# call 99 (NOTES v26, for the next session): small decode steps against the decode tile, with
# the new split rule: 16x64 one warp (default), 16x64 and 16x128 with 4 key-split warps,
# 16x32 one warp; contiguous, no host part
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 200 python3 tools/bench_kvcache.py --grid 1x1,1x8,8x8,64x8 --S 1024,8192,32768 \
   --layouts contiguous --tiles 16x64x1x2,16x64x4x2,16x128x4x2,16x32x1x2 --no-host > $OUT/tiles.txt 2>&1
echo "rc=$?"; grep -E "differs|Error" $OUT/tiles.txt; tail -14 $OUT/tiles.txt
