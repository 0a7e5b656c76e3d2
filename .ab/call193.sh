#!/usr/bin/env bash
# call 193 (session 38): main (f3cca44+, x1 128-key tiles merged) + .ab/x1_fwd_d64.patch (v62:
# 'tf32''s default forward at d = 57-64 the x1 128-key tile), against main in .ab/base
# (git archive HEAD cuflash kernels_cu setup.cfg tools; carry [".ab/base"]):
#  1. the tests the default touches (x1, TF32 wgmma, precision experiments, forward);
#  2. the A/B: 'tf32' forward at d = 64, T 2048 / 16384, causal and not, 2 rounds;
#  3. x1 racecheck read out (.ab/x1_race2.sh: hazard pairs, the forward kernel's SASS).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
git apply .ab/x1_fwd_d64.patch && echo "d64 patch applied" >> $OUT/side.txt
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu -n 12 tests/test_wgmma_f16x1.py \
  tests/test_wgmma_tf32.py tests/test_precision_experiments.py -rfE > $OUT/tests.txt 2>&1
echo "tests rc=$?" >> $OUT/side.txt
timeout 120 python3 tools/ab_speed.py --base $PWD/.ab/base --new $PWD --dtypes float32:tf32 \
  --d 64 --T 2048,16384 --passes fwd --causal 0,1 --rounds 2 --json $OUT/ab.json \
  > $OUT/ab.txt 2>&1; echo "ab rc=$?" >> $OUT/side.txt
git checkout -q cuflash tests && bash .ab/x1_race2.sh > $OUT/race2.txt 2>&1; echo "race rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"; cat $OUT/side.txt; tail -3 $OUT/tests.txt; tail -14 $OUT/ab.txt
head -12 $OUT/race_pairs.txt
