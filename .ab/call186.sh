#!/usr/bin/env bash
# call 186 (next session, on what call 185 merged): the float32 tables after v57-v60.
#  - bench_f32 --x3 forward, d 64 / 128, T 2048-16384, and backward, T 2048 / 4096 / 16384
#    (every precision's default, the x1 / x3 / TF32 wgmma tiles by name, torch's efficient);
#  - precision.yaml's float32 backward sweep (the points take the API's tiles since 82252dd).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 230 python3 tools/bench_f32.py --x3 --d 64 128 --T 2048 4096 8192 16384 --reps 3 \
  --jobs 14 > $OUT/bench_fwd.txt 2>&1; echo "bench fwd rc=$?" >> $OUT/side.txt
timeout 200 python3 tools/bench_f32.py --pass bwd --x3 --d 64 128 --T 2048 4096 16384 --reps 3 \
  --jobs 14 > $OUT/bench_bwd.txt 2>&1; echo "bench bwd rc=$?" >> $OUT/side.txt
AX='axes=[{sweep: float32_backward, seq_len: [1024, 4096, 16384], head_dim: [64, 128], batch: {tokens: 16384}, heads: {model_dim: 2048}, dtype: float32, precision: [ieee, tf32, highest], causal: [false, true], pass: backward}]'
timeout 150 python3 -m cuflash run experiments/precision.yaml --out $OUT/precision_bwd --set "$AX" \
  > $OUT/precision.txt 2>&1; echo "precision rc=$?" >> $OUT/side.txt
python3 -m cuflash.experiments.report precision $OUT/precision_bwd/results.csv > $OUT/report.txt 2>&1
echo "=================== SUMMARY"; cat $OUT/side.txt
grep -hE "^(fwd|bwd) " $OUT/bench_fwd.txt $OUT/bench_bwd.txt | \
  grep -E " (tf32|highest|torch_eff|wgmma_f16x1\S*|wgmma_tf32\S*) " | sort -u
tail -15 $OUT/report.txt
