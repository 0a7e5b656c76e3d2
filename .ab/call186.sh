#!/usr/bin/env bash
# call 186 (next session, after 185 on the same tree, with `.ab/staged_tiles.patch` applied too:
# the x3 / x1 producers' K/V streaming written once, StagedTiles in f16x3.cuh; 32 of 144 cubins
# differ from main's, by scheduling as far as the PTX shows): the whole GPU suite, then
# precision.yaml's float32 sweeps (forward and backward; the points take the API's tiles since
# 82252dd).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=12 LIMIT_TESTS=330 TAIL=3 OUT=/tmp/gs bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "^(FAILED|ERROR)" /tmp/gs/tests.log > $OUT/failures.txt; tail -3 /tmp/gs/tests.log >> $OUT/failures.txt
AX='axes=[{sweep: float32, seq_len: [1024, 4096, 16384], head_dim: [64, 128, 256], batch: {tokens: 16384}, heads: {model_dim: 2048}, dtype: float32, precision: [ieee, tf32, highest], causal: [false, true]}, {sweep: float32_backward, seq_len: [1024, 4096, 16384], head_dim: [64, 128], batch: {tokens: 16384}, heads: {model_dim: 2048}, dtype: float32, precision: [ieee, tf32, highest], causal: [false, true], pass: backward}]'
timeout 240 python3 -m cuflash run experiments/precision.yaml --out $OUT/precision_f32 --set "$AX" \
  > $OUT/precision.txt 2>&1; echo "precision rc=$?" >> $OUT/side.txt
python3 -m cuflash.experiments.report precision $OUT/precision_f32/results.csv > $OUT/report.txt 2>&1
echo "=================== SUMMARY"
cat /tmp/gs/summary.txt $OUT/side.txt; head -20 $OUT/failures.txt; tail -40 $OUT/report.txt
