#!/usr/bin/env bash
# call 103: the decode split rule of v27 (this tree) against v26's (.ab/base, HEAD~1 of the
# rule's commit), two alternating passes each, contiguous caches; then the decode GPU tests
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
G1="--grid 1x1,1x8,2x8,4x8,8x8,16x8,32x8,64x8 --S 1024,8192,32768,131072"
G2="--grid 128x8 --S 1024,8192,32768"
for r in 1 2; do
  for t in base new; do
    if [ $t = base ]; then R=.ab/base; else R=$PWD; fi
    PYTHONPATH=$R timeout 100 python3 $R/tools/bench_kvcache.py $G1 --layouts contiguous --no-host --no-torch > $OUT/${t}_$r.txt 2>&1; echo "$t $r rc=$?"
    PYTHONPATH=$R timeout 60 python3 $R/tools/bench_kvcache.py $G2 --layouts contiguous --no-host --no-torch >> $OUT/${t}_$r.txt 2>&1
  done
done
PYTHONPATH=$PWD timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_split_kv.py tests/test_kvcache.py tests/test_decode_tiles.py > $OUT/tests.txt 2>&1
echo "tests rc=$?"; tail -3 $OUT/tests.txt; grep -h "^FAILED" $OUT/tests.txt | head
