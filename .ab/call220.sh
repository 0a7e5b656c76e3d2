#!/usr/bin/env bash
# call 220 (session 43; v74's patch applied in the tree): (1) .ab/f64_tiles.py: float64's forward
# at d = 128 on 16-rows-a-warp tiles against the default and torch's math path (NOTES v74's
# prediction); (2) ALiBi's cost under ncu (.ab/alibi_ncu.py, issue 11); (3) the float64 / dmma GPU
# tests with v74's default; (4) precision.yaml's last points from call 219's rows; (5) on an H200
# only, if time is left, 'tf32''s backward against x1 and torch (.ab/v71_bench.py).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
timeout 120 python3 .ab/f64_tiles.py --T 4096 16384 --reps 5 > $OUT/f64_tiles.txt 2>&1
echo "f64 rc=$?"; grep -v "^# 20" $OUT/f64_tiles.txt | tail -32
timeout 40 python3 .ab/alibi_ncu.py --time > $OUT/alibi_time.txt 2>&1; echo "alibi time rc=$?"; cat $OUT/alibi_time.txt
timeout 150 ncu --section SpeedOfLight --section WarpStateStats --section InstructionStats \
  --section ComputeWorkloadAnalysis --section LaunchStats -k regex:fwd --csv --page raw \
  python3 .ab/alibi_ncu.py > $OUT/alibi_ncu.csv 2> $OUT/alibi_ncu.err
echo "ncu rc=$?"; python3 .ab/ncu_pick.py $OUT/alibi_ncu.csv > $OUT/alibi_ncu.txt 2>&1; head -c 6000 $OUT/alibi_ncu.txt
if [[ $SECONDS -lt 330 ]]; then
timeout 170 python3 -m pytest -q -p no:cacheprovider -n 16 -m gpu -k "float64 or dmma" tests > $OUT/f64_tests.txt 2>&1
echo "f64 tests rc=$?"; grep -E "passed|failed" $OUT/f64_tests.txt | tail -1; grep -E "^FAILED" $OUT/f64_tests.txt | head -10
fi
if [[ $SECONDS -lt 480 ]]; then
cp -r docs/results/v73/call219/precision $OUT/precision
timeout $((560 - SECONDS)) python3 -m cuflash run experiments/precision.yaml --out $OUT/precision > $OUT/precision_log.txt 2>&1
echo "precision rc=$?"; tail -2 $OUT/precision_log.txt; wc -l < $OUT/precision/results.csv
python3 -m cuflash.experiments.report precision $OUT/precision/results.csv > $OUT/report_precision.md 2>&1
python3 -m cuflash.experiments.report precision_summary $OUT/precision/results.csv > $OUT/report_precision_summary.md 2>&1
fi
echo "elapsed ${SECONDS}s"
