#!/usr/bin/env bash
# call 95 (NOTES v26): host time per decode call (least of 3 passes), this tree against
# .ab/base (d200dc7) with torch cuDNN beside; the KV-cache GPU tests; a split-KV sweep of the
# decode defaults (blocks per SM x split cap) over issue 14's grid
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
for t in new base new; do
  root=$PWD; [ $t = base ] && root=$PWD/.ab/base
  echo "=== $t" >> $OUT/host.txt
  PYTHONPATH=$root timeout 200 python3 tools/bench_kvcache.py --grid 1x8 --S 1024 \
     --layouts contiguous >> $OUT/host.txt 2>&1
done
grep -E "===|host " $OUT/host.txt
export PYTHONPATH=$PWD
timeout 240 python3 -m pytest -q -m gpu tests/test_kvcache.py tests/test_split_kv.py tests/test_decode_tiles.py -n 8 -rfE -p no:cacheprovider > $OUT/kv_tests.log 2>&1; echo "kv tests rc=$?"; tail -2 $OUT/kv_tests.log
timeout 280 python3 tools/bench_kvcache.py --grid 1x1,1x8,8x8,64x8 --S 1024,8192,32768,131072 \
   --layouts contiguous --bps 1,2,8 --max-splits 8,16,32,128  --no-host > $OUT/splits.txt 2>&1
echo "sweep rc=$?"; tail -18 $OUT/splits.txt
