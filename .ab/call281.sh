#!/usr/bin/env bash
# Session 56, call 281, at df88767 (v104 + v105, the lone-merge test's rows mended):
# (1) the mended test; (2) tools/bench_kvcache.py, the README's decode grid; (3) the whole GPU
# suite at this commit. Each step cut to the time left before DEADLINE; key results last.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT
DEADLINE=${DEADLINE:-560}
lim() { local l=$((DEADLINE - SECONDS)); [ $l -gt $1 ] && l=$1; [ $l -lt 1 ] && l=1; echo $l; }
timeout $(lim 60) python3 -m pytest -q -m gpu tests/test_kvcache.py -k lone_split -rfE -p no:cacheprovider > $OUT/lone.txt 2>&1; echo "lone rc=$? ${SECONDS}s"
timeout $(lim 230) python3 tools/bench_kvcache.py --grid 1x1,1x8,4x8,8x8,32x8,64x8 --S 1024,8192,32768,131072 --layouts contiguous,paged --pages 256 > $OUT/bench_kvcache.txt 2>&1; echo "bench rc=$? ${SECONDS}s"
LIMIT_TESTS=$(lim 300) STEPS="env tests" bash tests/gpu_session.sh > $OUT/gs.txt 2>&1; echo "suite done ${SECONDS}s"
echo "== results"; tail -1 $OUT/lone.txt; grep -A3 "=== summary" $OUT/gs.txt; grep -E "passed|failed" $OUT/gs.txt | tail -1
grep -E "^FAILED|^ERROR" $OUT/gs.txt | head -8 | cut -c1-200; grep -m1 -E "H100|H200" $OUT/gs.txt
tail -45 $OUT/bench_kvcache.txt | cut -c1-200
