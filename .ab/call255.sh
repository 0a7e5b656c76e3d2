#!/usr/bin/env bash
# call 255 (session 50): the whole GPU suite at v89's commit, then the GPU mutant of its
# unmapped fallback
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-500}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests/test_gpu_kernels.py -k three_consumer > $OUT/three.txt 2>&1; echo "three rc=$? at ${SECONDS}s"; tail -3 $OUT/three.txt
timeout 50 python3 tools/mutants.py --gpu gpu_three_consumer_unmapped > $OUT/mutants.txt 2>&1
echo "mutants rc=$? at ${SECONDS}s"; tail -2 $OUT/mutants.txt
STEPS="env tests" LIMIT_TESTS=$((L - SECONDS - 10)) OUT=$OUT/gs TAIL=8 bash tests/gpu_session.sh 2>&1 | tail -10
(cd $OUT && tar czf gs.tgz gs && rm -rf gs)
echo "elapsed ${SECONDS}s"
