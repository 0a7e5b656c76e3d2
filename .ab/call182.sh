#!/usr/bin/env bash
# call 182 (session 35): (1) what staging costs in float32 tensor-core calls (.ab/stage_time.py),
# (2) precision.yaml's float32 backward sweep alone (x3 / x1 backwards since its last run).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 150 python3 .ab/stage_time.py > $OUT/stage_time.txt 2>&1; echo "stage rc=$?" >> $OUT/side.txt
AX='axes=[{sweep: float32_backward, seq_len: [1024, 4096, 16384], head_dim: [64, 128], batch: {tokens: 16384}, heads: {model_dim: 2048}, dtype: float32, precision: [ieee, tf32, highest], causal: [false, true], pass: backward}]'
timeout 280 python3 -m cuflash run experiments/precision.yaml --out $OUT/precision_bwd --set "$AX" \
  > $OUT/precision.txt 2>&1; echo "precision rc=$?" >> $OUT/side.txt
python3 -m cuflash.experiments.report precision $OUT/precision_bwd/results.csv > $OUT/report.txt 2>&1
echo "=================== SUMMARY"; cat $OUT/side.txt; cat $OUT/stage_time.txt | tail -40
tail -25 $OUT/report.txt
