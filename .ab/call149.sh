#!/usr/bin/env bash
# call 149 (main, NOTES v38): the whole GPU suite at the new 'tf32' default, then precision.yaml's
# float32 'tf32' forward sweep (the README's table rows that moved).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=14 LIMIT_TESTS=320 TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
echo "suite rc=$?"
timeout 200 python3 -m cuflash run experiments/precision.yaml --out $OUT/prec --set 'axes=[{sweep: float32,
  seq_len: [1024, 4096, 16384], head_dim: [64, 128, 256], batch: {tokens: 16384},
  heads: {model_dim: 2048}, dtype: float32, precision: [tf32], causal: [false, true]}]' > $OUT/prec.txt 2>&1
echo "prec rc=$?"
python3 -m cuflash.experiments.report precision $OUT/prec/results.csv > $OUT/report.txt 2>&1
(cd $OUT && tar czf prec.tgz prec && rm -rf prec)
echo "=================== SUMMARY"; cat $OUT/summary.txt; tail -2 $OUT/tests.log; grep -E "failed|FAILED" $OUT/tests.log | head
tail -40 $OUT/report.txt
