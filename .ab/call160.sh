#!/usr/bin/env bash
# call 160 (after call 159, with .ab/tf32_unstaged.patch merged if it won): the whole GPU suite at
# the final commit, then precision.yaml's float32 'tf32' forward at d = 64 and 128 with T = 2048
# added (issue 15's range is T = 2048..16384; the yaml's own axis stops at 1024 / 4096 / 16384),
# as far as 150 s go (results.csv keeps each point as it is measured).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=14 LIMIT_TESTS=300 TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
echo "suite rc=$?"; cat $OUT/summary.txt; tail -2 $OUT/tests.log
timeout 150 python3 -m cuflash run experiments/precision.yaml --out $OUT/prec --set 'axes=[{sweep: float32,
  seq_len: [1024, 2048, 4096, 16384], head_dim: [64, 128], batch: {tokens: 16384},
  heads: {model_dim: 2048}, dtype: float32, precision: [tf32], causal: [false, true]}]' > $OUT/prec.txt 2>&1
echo "prec rc=$?"
python3 -m cuflash.experiments.report precision $OUT/prec/results.csv > $OUT/report.txt 2>&1
(cd $OUT && tar czf prec.tgz prec && rm -rf prec)
echo "=================== SUMMARY"; tail -20 $OUT/report.txt
