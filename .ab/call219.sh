#!/usr/bin/env bash
# call 219 (session 42): issue 11's two speed bars on today's tree (tools/bench_variants.py,
# 3 rounds; the window also on the one-consumer 64 x 64 x 8 x 2 tile, two blocks an SM), then
# experiments/precision.yaml whole (issue 15's table; last run whole at v35), resumable.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 150 python3 tools/bench_variants.py --rounds 3 --window-tiles 64x64x8x2 > $OUT/variants.txt 2>&1
echo "variants rc=$?"; cat $OUT/variants.txt | grep -v "^#" | tail -30
P=${PREC_DIR:-$OUT/precision}; mkdir -p $P
timeout 400 python3 -m cuflash run experiments/precision.yaml --out $P > $OUT/precision_log.txt 2>&1
echo "precision rc=$?"; tail -3 $OUT/precision_log.txt; wc -l $P/results.csv
python3 -m cuflash.experiments.report precision $P/results.csv > $OUT/report_precision.md 2>&1
echo "report rc=$?"; date -u
