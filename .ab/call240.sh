#!/usr/bin/env bash
# call 240 (session 46): compute-sanitizer memcheck and racecheck on the forwards v81-v83 changed
# (tests/sanitize.py's cases: float16 d = 128, the 8-warp and warp-specialized wgmma forwards;
# bfloat16 d = 64, the one-consumer ws forward; float64 d = 64, the dmma forward), each warmed
# (compiled) first without the sanitizer. Steps guarded by the call's limit L.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-270}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
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
echo "elapsed ${SECONDS}s"
