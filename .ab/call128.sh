#!/usr/bin/env bash
# call 128 (session 24, nvidia-h200-x2): resume call 127's experiments/ring.yaml (it stopped at the
# 300 s limit after 19 of 30 points): the non-causal 512k ring point and the capacity sweep.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
cp -r .ab/var/call127/ring $OUT/ring
timeout 520 python3 -m cuflash run experiments/ring.yaml --out $OUT/ring > $OUT/ring_run.log 2>&1; echo "ring.yaml rc=$?"; tail -14 $OUT/ring_run.log
python3 -m cuflash plot $OUT/ring/results.csv > /dev/null 2>&1; echo "plot rc=$?"
python3 -m cuflash.experiments.report ring $OUT/ring/results.csv | tee $OUT/ring_table.txt | tail -12
tar -C $OUT -cf $OUT/ring.tar ring && rm -rf $OUT/ring  # at most 8 files come back
