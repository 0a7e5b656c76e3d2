#!/usr/bin/env bash
# call 226 (session 44; replaces call 225, which no machine came for: one call for everything, in
# order of need). The tree: v79 (float64's forward skips O's rescaling while no row's max moves
# by more than 2^8). (1) the whole GPU suite (test_running_max_climbs among it); (2) ab_speed,
# float64 forward, against .ab/base (0e70a60, carried); (3) .ab/f64_tiles.py at the default
# tiles with torch's math path; (4) GPU mutant gpu_lazy_rescale_only_first_tile;
# (5) precision.yaml's float64 forward at d = 64 and 128 again, torch's rows too (same-run ratios;
# the rest resumed from call 221's results); (6) .ab/f64_bwd_tiles.py with dK/dV on m16n8k16;
# (7) sanitizer on the float64 case.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-600}   # the call's limit: later steps fit inside it
STEPS="env tests" LIMIT_TESTS=${LIMIT_TESTS:-290} OUT=$OUT/gs TAIL=4 bash tests/gpu_session.sh
timeout 130 python3 tools/ab_speed.py --base .ab/base --new . --dtypes float64 --d 64,128 --T 4096,16384 \
  --passes fwd --rounds 2 > $OUT/ab_fwd.txt 2>&1; echo "ab fwd rc=$?"
timeout 50 python3 .ab/f64_tiles.py --d 128 64 --T 4096 16384 --reps 5 --tiles default > $OUT/f64_fwd.txt 2>&1
echo "f64 fwd rc=$?"
if [[ $SECONDS -lt $((L - 100)) ]]; then
  timeout 40 python3 tools/mutants.py --gpu gpu_lazy_rescale_only_first_tile > $OUT/mutants.txt 2>&1
  echo "mutants rc=$?"; tail -2 $OUT/mutants.txt
fi
if [[ $SECONDS -lt $((L - 100)) ]]; then
  P=$OUT/precision; python3 .ab/prec_drop.py docs/results/v76/call221/precision $P 64 128 --torch
  timeout $((L - 25 - SECONDS)) python3 -m cuflash run experiments/precision.yaml --out $P > $P/log.txt 2>&1
  echo "precision rc=$?"; tail -2 $P/log.txt; wc -l < $P/results.csv
  python3 -m cuflash.experiments.report precision $P/results.csv > $P/report_precision.md 2>&1
  python3 -m cuflash.experiments.report precision_summary $P/results.csv > $P/report_precision_summary.md 2>&1
  tar -czf $OUT/precision.tgz -C $OUT precision && rm -rf $P
fi
if [[ $SECONDS -lt $((L - 80)) ]]; then
  timeout $((L - 20 - SECONDS)) python3 .ab/f64_bwd_tiles.py --d 64 --T 4096 --reps 3 \
    --tiles 64x64x8x2,16x64x4x2 > $OUT/f64_bwd.txt 2>&1; echo "f64 bwd rc=$?"
fi
if [[ $SECONDS -lt $((L - 120)) ]]; then
  timeout 40 python3 tests/sanitize.py case float64 128 > $OUT/sanitize.txt 2>&1; echo "warm rc=$?"
  timeout 50 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tests/sanitize.py case float64 128 >> $OUT/sanitize.txt 2>&1; echo "memcheck rc=$?"
  timeout $((L - 15 - SECONDS)) compute-sanitizer --tool racecheck --error-exitcode 1 python3 tests/sanitize.py case float64 128 >> $OUT/sanitize.txt 2>&1; echo "racecheck rc=$?"
  tail -3 $OUT/sanitize.txt
fi
echo "=== summary"; cat $OUT/gs/summary.txt; grep -E "passed|failed" $OUT/gs/tests.log | tail -1
grep -E "^FAILED|^ERROR" $OUT/gs/tests.log | head -8
grep -v "^round" $OUT/ab_fwd.txt | tail -10; grep -v "^# 20" $OUT/f64_fwd.txt | tail -12
grep -v "^# 20" $OUT/f64_bwd.txt 2>/dev/null | tail -6
echo "elapsed ${SECONDS}s"
