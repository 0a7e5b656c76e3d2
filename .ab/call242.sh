#!/usr/bin/env bash
# call 242 (session 47): the checks the v81-v83 merge still owes, at main's kernels (a38030c):
# (1) the whole GPU suite, (2) compute-sanitizer memcheck and racecheck on the forwards v81-v83
# changed (call 240's cases: float16 d = 128, bfloat16 d = 64, float64 d = 64), each case warmed
# (compiled) first without the sanitizer, the warm-up overlapping the suite's compiles.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-590}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
STEPS="env tests" LIMIT_TESTS=330 OUT=$OUT/gs TAIL=6 bash tests/gpu_session.sh 2>&1 | tail -8
(cd $OUT && tar czf gs.tgz gs && rm -rf gs); echo "suite done at ${SECONDS}s"
for c in "float16 128" "bfloat16 64" "float64 64"; do timeout 100 python3 tests/sanitize.py case $c > "$OUT/warm_${c/ /_}.txt" 2>&1 & done; wait
echo "warm at ${SECONDS}s"; tail -qn1 $OUT/warm_*.txt
for tool in memcheck racecheck; do
  for c in "float16 128" "bfloat16 64" "float64 64"; do
    left=$((L - SECONDS)); [ $left -lt 20 ] && { echo "skip $tool $c"; continue; }
    timeout $left compute-sanitizer --tool $tool --error-exitcode 1 python3 tests/sanitize.py case $c \
      > "$OUT/${tool}_${c/ /_}.txt" 2>&1
    echo "$tool $c rc=$? at ${SECONDS}s: $(grep -c '^ok' "$OUT/${tool}_${c/ /_}.txt") cases ok, $(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' "$OUT/${tool}_${c/ /_}.txt" | tail -1)"
  done
done
(cd $OUT && tar czf san.tgz warm_* memcheck_* racecheck_* && rm -f warm_* memcheck_* racecheck_*)
echo "elapsed ${SECONDS}s"
