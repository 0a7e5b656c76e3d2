#!/usr/bin/env bash
# call 221 (session 43; v76 in the tree: float64's forward default 128 x 16 x 8 x 2 at
# 64 < d <= 128 on sm_90): (1) the whole GPU suite; (2) .ab/f64_tiles.py at d = 96 (v76's
# prediction there); (3) tools/bench_variants.py's score modifiers, 5 rounds (v77: two tools
# disagreed on ALiBi); (4) precision.yaml's float64 forward at d = 128 again (call 219's rows
# less those), packed into one archive (a call returns at most 8 files).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" LIMIT_TESTS=${LIMIT_TESTS:-320} OUT=$OUT/gs TAIL=4 bash tests/gpu_session.sh
timeout 90 python3 .ab/f64_tiles.py --d 96 --T 4096 16384 --reps 5 \
  --tiles 64x32x8x2,128x16x8x2,64x16x4x1 > $OUT/f64_96.txt 2>&1
echo "f64 d=96 rc=$?"
timeout 100 python3 tools/bench_variants.py --parts modifiers --rounds 5 > $OUT/variants.txt 2>&1
echo "variants rc=$?"
if [[ $SECONDS -lt 500 ]]; then
  P=$OUT/precision; python3 .ab/prec_drop.py docs/results/v73/call219/precision $P 128
  timeout $((575 - SECONDS)) python3 -m cuflash run experiments/precision.yaml --out $P > $P/log.txt 2>&1
  echo "precision rc=$?"; tail -2 $P/log.txt; wc -l < $P/results.csv
  python3 -m cuflash.experiments.report precision $P/results.csv > $P/report_precision.md 2>&1
  python3 -m cuflash.experiments.report precision_summary $P/results.csv > $P/report_precision_summary.md 2>&1
  tar -czf $OUT/precision.tgz -C $OUT precision && rm -rf $P
fi
echo "=== summary"; cat $OUT/gs/summary.txt; grep -E "passed|failed" $OUT/gs/tests.log | tail -2
grep -E "^FAILED|^ERROR" $OUT/gs/tests.log | head -8
grep -v "^# 20" $OUT/f64_96.txt | tail -16; grep -v "^#" $OUT/variants.txt | tail -8
echo "elapsed ${SECONDS}s"
