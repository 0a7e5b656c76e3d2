#!/usr/bin/env bash
# call 98 (NOTES v26): issue 14's grid again with bench_kvcache's _graph_ms synchronizing the
# device before its non-blocking stream (call 97's paged cells: eager calls raced the pools'
# scatter on the default stream)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 230 python3 tools/bench_kvcache.py --grid 1x1,1x8,8x8,64x8 --S 1024,8192,32768,131072 \
   --layouts contiguous,paged --pages 256 > $OUT/bench_kvcache.txt 2>&1
echo "bench rc=$?"; grep -E "host |reference|differs" $OUT/bench_kvcache.txt; grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $OUT/bench_kvcache.txt | tail -32
