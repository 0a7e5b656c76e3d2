#!/usr/bin/env bash
# call 93 (NOTES v26): issue 14's host time per decode step, old tree (.ab/base = d200dc7's
# cuflash + kernels_cu) against this one; then the whole GPU suite (ForwardLaunch's per-call
# path is every forward's)
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
python3 -c "import cupy, numpy, sys; print(sys.version.split()[0], cupy.__version__, numpy.__version__)" >> $OUT/env.txt
for i in 1 2; do
  PYTHONPATH=$PWD/.ab/base timeout 120 python3 .ab/decode_host2.py old >> $OUT/host.txt 2>&1
  PYTHONPATH=$PWD timeout 120 python3 .ab/decode_host2.py new >> $OUT/host.txt 2>&1
done
cat $OUT/host.txt
export PYTHONPATH=$PWD
STEPS="env tests" JOBS=14 LIMIT_TESTS=420 TAIL=3 OUTDIR=$OUT bash tests/gpu_session.sh > $OUT/suite.txt 2>&1; echo "suite rc=$?"
tail -5 $OUT/suite.txt
cat $OUT/env.txt
