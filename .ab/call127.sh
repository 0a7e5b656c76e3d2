#!/usr/bin/env bash
# Issue 16 on the two-H200 kind (nvidia-h200-x2), when it is lent: the 2-GPU tests, then
# experiments/ring.yaml (~5 minutes after compiles), its plots and table. NCCL_NVLS_ENABLE=0
# call 127 (session 24): ring_call.sh plus the 2-GPU test of test_ring_experiments.py
# (the device README: no NVLink multicast).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpus.txt; nvidia-smi topo -m >> $OUT/gpus.txt
timeout 230 python3 -m pytest -q -m gpu tests/test_distributed.py tests/test_ring_experiments.py -rfE -p no:cacheprovider > $OUT/distributed.log 2>&1; echo "2-GPU tests rc=$?"; tail -2 $OUT/distributed.log
timeout 300 python3 -m cuflash run experiments/ring.yaml --out $OUT/ring > $OUT/ring_run.log 2>&1; echo "ring.yaml rc=$?"; tail -5 $OUT/ring_run.log
python3 -m cuflash plot $OUT/ring/results.csv > /dev/null 2>&1; echo "plot rc=$?"
python3 -m cuflash.experiments.report ring $OUT/ring/results.csv | tee $OUT/ring_table.txt | tail -30
nvidia-smi --query-gpu=name,memory.used --format=csv >> $OUT/gpus.txt; ls $OUT/ring; tar -C $OUT -cf $OUT/ring.tar ring && rm -rf $OUT/ring  # at most 8 files come back
