#!/usr/bin/env bash
# call 220 (session 42; steps 2 and 3 swapped after two refused starts left 562 s): (1) .ab/f64_tiles.py: float64's forward at d = 128 on 16-rows-a-warp
# tiles against the default and torch's math path (NOTES v74's prediction); (2) finish
# experiments/precision.yaml from call 219's 411 rows; (3) the float64 / dmma GPU tests with
# v74's default (64 x 16 x 4 x 1 at 64 < d <= 128 on sm_90) in the tree; (4) on an H200 only,
# and if time is left, 'tf32''s backward against x1 and torch (.ab/v71_bench.py).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
timeout 120 python3 .ab/f64_tiles.py --T 4096 16384 --reps 5 > $OUT/f64_tiles.txt 2>&1
echo "f64 rc=$?"; grep -v "^# 20" $OUT/f64_tiles.txt | tail -32
timeout 170 python3 -m pytest -q -p no:cacheprovider -n 16 -m gpu -k "float64 or dmma" tests > $OUT/f64_tests.txt 2>&1
echo "f64 tests rc=$?"; grep -E "passed|failed" $OUT/f64_tests.txt | tail -1; grep -E "^FAILED" $OUT/f64_tests.txt | head -10
if [[ $SECONDS -lt 240 ]]; then
cp -r docs/results/v73/call219/precision $OUT/precision
timeout 100 python3 -m cuflash run experiments/precision.yaml --out $OUT/precision > $OUT/precision_log.txt 2>&1
echo "precision rc=$?"; tail -2 $OUT/precision_log.txt; wc -l < $OUT/precision/results.csv
python3 -m cuflash.experiments.report precision $OUT/precision/results.csv > $OUT/report_precision.md 2>&1
python3 -m cuflash.experiments.report precision_summary $OUT/precision/results.csv > $OUT/report_precision_summary.md 2>&1
fi
if [[ "$GPU" == *H200* && $SECONDS -lt 240 ]]; then
  timeout 120 python3 .ab/v71_bench.py --d 64 128 --T 2048 4096 16384 --reps 3 > $OUT/v72_bench.txt 2>&1
  echo "bench rc=$?"; sed -n '/^# d T/,$p' $OUT/v72_bench.txt | grep " tf32 "
fi
echo "elapsed ${SECONDS}s"
