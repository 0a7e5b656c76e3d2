#!/usr/bin/env bash
# call 203 (next session, v67; carry .ab/base, refreshed from HEAD): the fused-D patch.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
# v67 (.ab/fused_d.patch: D = rowsum(dO ∘ O) in dout's staging pass, no preprocess launch
# for the float16-product backward): its GPU tests and the A/B of 'tf32' / 'highest' backward
# against main. Prediction: +1.5-2% at T = 2048, +0.5-1% at 4096, within noise at 16384.
git apply .ab/fused_d.patch && echo "fused D applied" >> $OUT/side.txt
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu -n 12 tests/test_f16x3_stage.py \
  tests/test_wgmma_f16x1.py tests/test_wgmma_f16x3.py -k "backward or pair or stag" -rfE \
  > $OUT/tests_d.txt 2>&1; echo "tests D rc=$?" >> $OUT/side.txt
timeout 200 python3 tools/ab_speed.py --base $PWD/.ab/base --new $PWD \
  --dtypes float32:tf32,float32:highest --d 64,128 --T 2048,4096 --passes bwd --causal 0,1 \
  --rounds 2 --json $OUT/ab_d.json > $OUT/ab_d.txt 2>&1; echo "ab D rc=$?" >> $OUT/side.txt
git apply -R .ab/fused_d.patch
cat $OUT/side.txt; tail -2 $OUT/tests_d.txt; tail -8 $OUT/ab_d.txt
