#!/usr/bin/env bash
# call 249 (session 48): after run_v84.sh, on the tree the device copies (v84 applied when it is
# to be merged, main's otherwise). LIMIT: the call's seconds; steps in order, each if time allows:
#   san     compute-sanitizer memcheck and racecheck over the forwards v81-v84 changed
#           (.ab/call240.sh: tests/sanitize.py's float16 d = 128, bfloat16 d = 64, float64 d = 64)
#   stages  v84 holds K's stage until the vote: the 3-stage 128 x 128 x 12 forward beside the
#           2-stage default at d = 128 (bench_fwd_tiles, float16, T = 4096, 16384, no torch)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-400}
LIMIT=$((L - 75)) OUT=$OUT/san bash .ab/call240.sh 2>&1 | tail -9
(cd $OUT && tar czf san.tgz san && rm -rf san)
t=$((L - SECONDS - 5))
[ $t -gt 40 ] && timeout $t python3 tools/bench_fwd_tiles.py --tiles default,128x128x12x3 --d 128 \
  --dtypes float16 --T 4096,16384 --rounds 2 --no-torch > $OUT/stages.txt 2>&1
echo "stages rc=$? at ${SECONDS}s"; tail -8 $OUT/stages.txt
