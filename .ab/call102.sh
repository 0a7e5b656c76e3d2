#!/usr/bin/env bash
# call 102: decode ring depth (2/3 stages) × split target (1/2/4/8 blocks per SM), three passes
# (call 101's single pass moved up to 10% against call 100 on the same configuration), over
# B·Hkv = 1 … 512, to fit a split-and-depth rule on medians
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/env.txt
for r in 1 2 3; do
  timeout 170 python3 tools/bench_kvcache.py --grid 1x1,1x8,4x8,8x8,32x8,64x8 --S 1024,8192,32768,131072 \
     --layouts contiguous --no-host --no-torch --tiles 16x64x4x2,16x64x4x3 --bps 1,2,4,8 \
     > $OUT/pass$r.txt 2>&1
  echo "pass $r rc=$?"
done
timeout 120 python3 tools/bench_kvcache.py --grid 1x1,1x8,4x8,8x8,32x8,64x8 --S 1024,8192,32768,131072 \
   --layouts contiguous --no-host > $OUT/torch.txt 2>&1; echo "torch rc=$?"
tail -26 $OUT/pass3.txt | cut -c1-200
