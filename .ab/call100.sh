#!/usr/bin/env bash
# call 100 (next session, on a tree with branch decode-keysplit merged): the KV-cache GPU tests
# on the key-split decode tile, then issue 14's grid as in call 98 (contiguous and paged 256)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 240 python3 -m pytest -q -m gpu tests/test_kvcache.py tests/test_split_kv.py tests/test_decode_tiles.py -n 8 -rfE -p no:cacheprovider > $OUT/kv_tests.log 2>&1; echo "kv tests rc=$?"; tail -2 $OUT/kv_tests.log
timeout 230 python3 tools/bench_kvcache.py --grid 1x1,1x8,8x8,64x8 --S 1024,8192,32768,131072 \
   --layouts contiguous,paged --pages 256 > $OUT/bench_kvcache.txt 2>&1
echo "bench rc=$?"; grep -E "host |reference|differs" $OUT/bench_kvcache.txt; grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $OUT/bench_kvcache.txt | tail -32
