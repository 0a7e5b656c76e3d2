#!/usr/bin/env bash
# call 153 (main at v40's merge): the GPU tests of float32's TF32 paths and precision (-k "tf32 or
# precision"), then precision.yaml's float32 'tf32' forward sweep again (the README's row).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 150 python3 -m pytest -q -m gpu -n 14 -p no:cacheprovider -rfE -k "tf32 or precision" tests \
  > $OUT/tests.txt 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests.txt
timeout 100 python3 -m cuflash run experiments/precision.yaml --out $OUT/prec --set 'axes=[{sweep: float32,
  seq_len: [1024, 4096, 16384], head_dim: [64, 128, 256], batch: {tokens: 16384},
  heads: {model_dim: 2048}, dtype: float32, precision: [tf32], causal: [false, true]}]' > $OUT/prec.txt 2>&1
echo "prec rc=$?"
python3 -m cuflash.experiments.report precision $OUT/prec/results.csv > $OUT/report.txt 2>&1
(cd $OUT && tar czf prec.tgz prec && rm -rf prec)
echo "=================== SUMMARY"; grep -E "passed|failed" $OUT/tests.txt | tail -3; tail -22 $OUT/report.txt
