#!/usr/bin/env bash
# call 158 (branch tf32-ws; call 157's machine stopped answering, nothing came back): the whole
# GPU suite, the new GPU mutant, then precision.yaml's float32 'tf32' forward sweep (as far as
# 75 s go; results.csv keeps each point as it is measured).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=14 LIMIT_TESTS=300 TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
echo "suite rc=$?"; cat $OUT/summary.txt; tail -2 $OUT/tests.log
timeout 40 python3 tools/mutants.py --gpu gpu_wgmma_tf32_ws_q_rows > $OUT/mutant.txt 2>&1
echo "mutant rc=$?"; tail -2 $OUT/mutant.txt
timeout 75 python3 -m cuflash run experiments/precision.yaml --out $OUT/prec --set 'axes=[{sweep: float32,
  seq_len: [1024, 4096, 16384], head_dim: [64, 128], batch: {tokens: 16384},
  heads: {model_dim: 2048}, dtype: float32, precision: [tf32], causal: [false, true]}]' > $OUT/prec.txt 2>&1
echo "prec rc=$?"
python3 -m cuflash.experiments.report precision $OUT/prec/results.csv > $OUT/report.txt 2>&1
(cd $OUT && tar czf prec.tgz prec && rm -rf prec)
echo "=================== SUMMARY"; tail -16 $OUT/report.txt
