#!/usr/bin/env bash
# call 197 (v63): the forward's Q split with every load of a batch first (f16x3.cuh,
# split_rows_f16). 1. x1 / x3 GPU tests; 2. A/B against main (.ab/base, carried) of the float32
# tensor-core forwards; 3. the block timeline (.ab/prof.patch on top) of the forward cells.
# Prediction: a forward block's start (entry -> Q made) 7.0 -> 2-3 us at d = 128 (call 196);
# 'tf32' forward d = 128 T = 2048 causal +12-17%, non-causal +6-10%, T = 16384 +1-3%; d = 64
# +3-8% at 2048; 'highest' alike, a little less (its blocks' loops are longer).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 12 tests/test_wgmma_f16x1.py \
  tests/test_wgmma_f16x3.py -rfE > $OUT/tests.txt 2>&1; echo "tests rc=$?" >> $OUT/side.txt
timeout 260 python3 tools/ab_speed.py --base $PWD/.ab/base --new $PWD \
  --dtypes float32:tf32,float32:highest --d 64,128 --T 2048,4096,16384 --passes fwd --causal 0,1 \
  --rounds 2 --json $OUT/ab.json > $OUT/ab.txt 2>&1; echo "ab rc=$?" >> $OUT/side.txt
git apply .ab/prof.patch && CUFLASH_PROF=1 CUFLASH_CACHE_DIR=/tmp/profcache PROF_CELLS=fwd \
  timeout 100 python3 .ab/prof_run.py > $OUT/prof.txt 2>&1; echo "prof rc=$?" >> $OUT/side.txt
git apply -R .ab/prof.patch
echo "=================== SUMMARY"; cat $OUT/side.txt; tail -3 $OUT/tests.txt; grep -E "FAILED|ERROR" $OUT/tests.txt | head
grep -E "^##|ready|share" $OUT/prof.txt; tail -16 $OUT/ab.txt
