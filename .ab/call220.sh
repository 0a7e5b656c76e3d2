#!/usr/bin/env bash
# call 220 (session 42): finish experiments/precision.yaml from call 219's 411 rows (the runner
# resumes a results folder), then the report (now with torch's math path beside its efficient one).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cp -r docs/results/v73/call219/precision $OUT/precision
timeout 300 python3 -m cuflash run experiments/precision.yaml --out $OUT/precision > $OUT/precision_log.txt 2>&1
echo "precision rc=$?"; tail -4 $OUT/precision_log.txt; wc -l $OUT/precision/results.csv
python3 -m cuflash.experiments.report precision $OUT/precision/results.csv > $OUT/report_precision.md 2>&1
echo "report rc=$?"; grep -c "^| " $OUT/report_precision.md; date -u
# then (session 42): 'tf32''s backward against x1 and torch on this GPU (H200 if it came)
timeout 200 python3 .ab/v71_bench.py --d 64 128 --T 2048 4096 16384 --reps 3 > $OUT/v72_bench.txt 2>&1
echo "bench rc=$?"; sed -n '/^# d T/,$p' $OUT/v72_bench.txt | grep " tf32 "; grep "^# 20" $OUT/v72_bench.txt
