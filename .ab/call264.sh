#!/usr/bin/env bash
# Session 52, call 264: v93 (8 warps on 128-key decode tiles) and v94 (pages of 32 on two warps)
# again after call 262's NameError, and v95 (split caps at B·Hkv = 1 and 1 x 8: is the merge the tail?)
export PYTHONPATH=$PWD
mkdir -p $OUT
timeout 200 python3 .ab/ring_ab.py 16x128x8x3,16x128x8x2 > $OUT/v93.txt 2>&1; echo "v93 rc=$?"
timeout 150 python3 .ab/ring_ab.py auto@64,auto@32,16x128x4x3@64,16x128x8x3@64 \
  1x1x8192,1x1x32768,1x1x131072,1x8x32768 > $OUT/v95.txt 2>&1; echo "v95 rc=$?"
timeout 150 python3 .ab/page32_ab.py > $OUT/page32.txt 2>&1; echo "page32 rc=$?"
tail -8 $OUT/v93.txt; tail -5 $OUT/v95.txt; tail -7 $OUT/page32.txt
