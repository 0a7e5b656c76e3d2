#!/usr/bin/env bash
# call 157 (branch tf32-ws, NOTES v42): the warp-specialized TF32 forward as the default of
# 'tf32' on sm_90: the whole GPU suite, precision.yaml's float32 'tf32' forward sweep again (the
# README's row), the new GPU mutant, and racecheck on the d = 64 float32 cases.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=14 LIMIT_TESTS=320 TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
echo "suite rc=$?"; cat $OUT/summary.txt; tail -2 $OUT/tests.log
timeout 110 python3 -m cuflash run experiments/precision.yaml --out $OUT/prec --set 'axes=[{sweep: float32,
  seq_len: [1024, 4096, 16384], head_dim: [64, 128, 256], batch: {tokens: 16384},
  heads: {model_dim: 2048}, dtype: float32, precision: [tf32], causal: [false, true]}]' > $OUT/prec.txt 2>&1
echo "prec rc=$?"
python3 -m cuflash.experiments.report precision $OUT/prec/results.csv > $OUT/report.txt 2>&1
(cd $OUT && tar czf prec.tgz prec && rm -rf prec)
timeout 60 python3 tools/mutants.py --gpu gpu_wgmma_tf32_ws_q_rows > $OUT/mutant.txt 2>&1
echo "mutant rc=$?"; tail -2 $OUT/mutant.txt
(timeout 90 compute-sanitizer --tool racecheck --error-exitcode 1 python3 tests/sanitize.py case float32 64 \
  > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$?"; grep -E "wgmma_tf32|SUMMARY" $OUT/racecheck.txt)
echo "=================== SUMMARY"; tail -22 $OUT/report.txt
