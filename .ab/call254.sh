#!/usr/bin/env bash
# call 254 (session 50), v89 at its commit: the whole GPU suite; compute-sanitizer memcheck and
# racecheck on the three-consumer forward (.ab/sanitize192.py); the forward tiles at d = 32 and 64
# (default, one consumer, three) beside cuDNN; the GPU mutant of the unmapped fallback.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-560}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
STEPS="env tests" LIMIT_TESTS=${LIMIT_TESTS:-260} OUT=$OUT/gs TAIL=4 bash tests/gpu_session.sh 2>&1 | tail -6
(cd $OUT && tar czf gs.tgz gs && rm -rf gs)
echo "tests done at ${SECONDS}s"
timeout 60 python3 .ab/sanitize192.py > $OUT/warm192.txt 2>&1; echo "warm rc=$? at ${SECONDS}s"; tail -2 $OUT/warm192.txt
for tool in memcheck racecheck; do
  left=$((L - SECONDS - 150)); [ $left -lt 30 ] && { echo "skip $tool"; continue; }; [ $left -gt 90 ] && left=90
  timeout $left compute-sanitizer --tool $tool --error-exitcode 1 python3 .ab/sanitize192.py > $OUT/$tool.txt 2>&1
  echo "$tool rc=$? at ${SECONDS}s: $(grep -c '^ok' $OUT/$tool.txt) ok, $(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' $OUT/$tool.txt | tail -1)"
done
t=$((L - SECONDS - 65)); [ $t -gt 110 ] && t=110
[ $t -gt 30 ] && timeout $t python3 tools/bench_fwd_tiles.py --tiles default,64x128x8x2,192x128x16x2 --d 64,32 \
  --dtypes float16,bfloat16 --T 1024,2048,4096,8192,16384 --rounds 2 > $OUT/speed.txt 2>&1
echo "speed rc=$? at ${SECONDS}s"
t=$((L - SECONDS - 3)); [ $t -gt 60 ] && t=60
[ $t -gt 25 ] && timeout $t python3 tools/mutants.py --gpu gpu_three_consumer_unmapped > $OUT/mutants.txt 2>&1
echo "mutants rc=$? at ${SECONDS}s"; tail -3 $OUT/mutants.txt
grep -v "^ \|^#" $OUT/speed.txt | tail -42
echo "elapsed ${SECONDS}s"
