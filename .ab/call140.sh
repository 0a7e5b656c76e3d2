#!/usr/bin/env bash
# call 140 (twenty-sixth session): experiments/precision.yaml whole (forward and, new, backward;
# 420 points), into results/precision so that a second call (carry results/precision) resumes it.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT results
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
timeout -s INT ${LIMIT:-520} python3 -m cuflash run experiments/precision.yaml --out results/precision \
  > $OUT/run.log 2>&1; echo "run rc=$?"
tar -czf $OUT/precision.tgz -C results precision
echo "=================== SUMMARY"; grep -c "^\[" $OUT/run.log; tail -4 $OUT/run.log
