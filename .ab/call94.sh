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
