#!/usr/bin/env bash
# Session 52, call 264: v93 (8 warps on 128-key decode tiles) and v94 (pages of 32 on two warps)
# again after call 262's NameError, and v95 (split caps at B·Hkv = 1 and 1 x 8: is the merge the tail?)
export PYTHONPATH=$PWD
mkdir -p $OUT
# the decode GPU tests at this tree (call 262's suite ran before _record_launches and the bench fix)
timeout 120 python3 -m pytest -q -m gpu tests/test_kvcache.py tests/test_decode_tiles.py -n 16 \
  -p no:cacheprovider -rfE > $OUT/kvtests.txt 2>&1; echo "kvtests rc=$?"; tail -2 $OUT/kvtests.txt
timeout 200 python3 .ab/ring_ab.py 16x128x8x3,16x128x8x2 > $OUT/v93.txt 2>&1; echo "v93 rc=$?"
timeout 150 python3 .ab/ring_ab.py auto@64,auto@32,16x128x4x3@64,16x128x8x3@64 \
  1x1x8192,1x1x32768,1x1x131072,1x8x32768 > $OUT/v95.txt 2>&1; echo "v95 rc=$?"
timeout 150 python3 .ab/page32_ab.py > $OUT/page32.txt 2>&1; echo "page32 rc=$?"
tail -8 $OUT/v93.txt; tail -5 $OUT/v95.txt; tail -7 $OUT/page32.txt
