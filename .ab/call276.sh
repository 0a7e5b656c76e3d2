#!/usr/bin/env bash
# Session 55's final call, at the final commit: the whole GPU suite, tests/sanitize.py kv under
# memcheck and racecheck, then the README's decode table (tools/bench_kvcache.py) in the time
# left before DEADLINE. Key results print last.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT
DEADLINE=${DEADLINE:-585}
STEPS="env tests sanitize" LIMIT_TESTS=260 SANITIZE_ARGS=kv LIMIT_SANITIZE_WARM=60 LIMIT_SANITIZE=200 \
  OUT=$OUT/gs TAIL=3 bash tests/gpu_session.sh > $OUT/gs.txt 2>&1; echo "suite+sanitize ${SECONDS}s"
L=$((DEADLINE - SECONDS)); [ $L -lt 1 ] && L=1
timeout $L python3 tools/bench_kvcache.py --grid 1x1,1x8,4x8,8x8,32x8,64x8 --S 1024,8192,32768,131072 \
  --layouts contiguous,paged --pages 256 > $OUT/bench_kvcache.txt 2>&1; echo "bench rc=$? ${SECONDS}s"
echo "== summary"; sed -n '/=== summary/,$p' $OUT/gs.txt; grep -hE "passed|failed|SUMMARY" $OUT/gs/*.log | tail -6
grep -hE "^FAILED|^ERROR" $OUT/gs/*.log | head -6 | cut -c1-200
tail -32 $OUT/bench_kvcache.txt | cut -c1-110
