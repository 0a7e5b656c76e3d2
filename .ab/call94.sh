#!/usr/bin/env bash
# call 94 (NOTES v26): host time per decode call measured alone (tools/bench_kvcache.py's
# chunked host time) and back to back, old tree (.ab/base) against this one, torch cuDNN beside
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
for t in base new; do
  root=$PWD; [ $t = base ] && root=$PWD/.ab/base
  echo "=== $t" >> $OUT/host.txt
  PYTHONPATH=$root timeout 200 python3 tools/bench_kvcache.py --grid 1x8 --S 1024 \
     --layouts contiguous >> $OUT/host.txt 2>&1
done
grep -E "===|host |reference|tottime|^ +[0-9]+ +[0-9.]+ " $OUT/host.txt | head -60
# small steps' GPU time against the split cap (the merge's cost: NOTES v12)
PYTHONPATH=$PWD timeout 200 python3 tools/bench_kvcache.py --grid 1x1,1x8,8x8 --S 1024,8192 \
   --layouts contiguous --max-splits 2,4,8,16,128 --no-host > $OUT/splits.txt 2>&1
tail -12 $OUT/splits.txt
