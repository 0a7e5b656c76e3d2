#!/usr/bin/env bash
# call 112 (issue 14): the split rule on the swizzled decode kernels: fill 1-4 blocks per SM,
# min key tiles per split 1 or 2 (bench knobs; no kernel change)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 280 python3 tools/bench_kvcache.py --grid 1x1,1x8,4x8,8x8 --layouts contiguous --fill 1,2,3,4 --no-host > $OUT/fill.txt 2>&1; echo "fill rc=$?"
timeout 150 python3 tools/bench_kvcache.py --grid 1x1,1x8,4x8,8x8,32x8,64x8 --S 1024,8192 --layouts contiguous --fill 2,4,8 --min-tiles 1,2 --no-host > $OUT/fill_small.txt 2>&1; echo "small rc=$?"
echo "=================== SUMMARY"
grep -A30 "^  B Hkv" $OUT/fill.txt | tail -17
grep -A30 "^  B Hkv" $OUT/fill_small.txt | tail -13
