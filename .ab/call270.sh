#!/usr/bin/env bash
# Call 270 (session 53), NOTES v98: warp-local K/V staging in the key-split decode kernels.
# (1) A/B against the tree before it (.ab/base, carried): the lone-block arm and the default at
# B·Hkv = 1 (4k, 32k) and 8 x 8 (32k), each tree in its own process, cuDNN in both;
# (2) racecheck and memcheck on small launches of the new kernels; (3) the decode GPU tests.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT
CELLS=1x1x4096,1x1x32768,8x8x32768
(timeout 70 python3 .ab/ring_ab.py auto@1 $CELLS > $OUT/new.txt 2>&1; echo "new rc=$?")
(cd .ab/base && PYTHONPATH=$PWD timeout 60 python3 ../ring_ab.py auto@1 $CELLS > $OUT/base.txt 2>&1; echo "base rc=$?")
timeout 30 python3 .ab/warp_race.py > $OUT/race_warm.txt 2>&1; echo "warm rc=$?"
timeout 40 compute-sanitizer --tool racecheck --error-exitcode 1 python3 .ab/warp_race.py > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$?"
timeout 30 compute-sanitizer --tool memcheck --error-exitcode 1 python3 .ab/warp_race.py > $OUT/memcheck.txt 2>&1; echo "memcheck rc=$?"
timeout 70 python3 -m pytest -q -m gpu tests/test_kvcache.py -x -p no:cacheprovider -n 16 -k "float16 or bfloat16 or f16" > $OUT/kvtests.txt 2>&1; echo "kvtests rc=$?"
tail -2 $OUT/kvtests.txt; tail -2 $OUT/racecheck.txt; tail -1 $OUT/memcheck.txt
echo "== base"; grep "S=" $OUT/base.txt | tail -3 | cut -c1-200
echo "== new"; grep "S=" $OUT/new.txt | tail -3 | cut -c1-200
