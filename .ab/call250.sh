#!/usr/bin/env bash
# call 250 (session 49): after run_v85.sh, on the tree v84 + v85 + v86 (.ab/spec84.patch,
# .ab/overlap85.patch, .ab/dqpipe86.patch applied in order). Carry [".ab/arms/v85"]: the tree of
# v84 + v85 alone (`git archive <stash of it> cuflash kernels_cu tools | tar -x -C .ab/arms/v85`).
# LIMIT: the call's seconds; steps in order, each if time allows:
#   ab86    v86's own share: tools/ab_speed.py --passes bwd, .ab/arms/v85 against this tree,
#           d = 128 and 64, T = 4096 and 16384, float16 and bfloat16, 2 rounds
#   san     compute-sanitizer memcheck and racecheck (.ab/call240.sh: tests/sanitize.py's
#           float16 d = 128, bfloat16 d = 64 and float64 d = 64 cases, forward and backward)
#   stages  the 3-stage 128 x 128 x 12 forward beside the 2-stage default (v84 holds K's stage
#           until the vote; bench_fwd_tiles, float16, d = 128, T = 4096, 16384, no torch)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-585}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
t=$((L * 2 / 5)); [ $t -gt 200 ] && t=200
timeout $t python3 tools/ab_speed.py --base .ab/arms/v85 --new . --dtypes float16,bfloat16 \
  --d 128,64 --T 4096,16384 --passes bwd --rounds 2 > $OUT/ab86.txt 2>&1
echo "ab86 rc=$? at ${SECONDS}s"; grep -v "^round" $OUT/ab86.txt | tail -20
t=$((L - SECONDS - 60)); [ $t -gt 330 ] && t=330
[ $t -gt 60 ] && { LIMIT=$t OUT=$OUT/san bash .ab/call240.sh 2>&1 | tail -9; (cd $OUT && tar czf san.tgz san && rm -rf san); }
t=$((L - SECONDS - 5))
[ $t -gt 40 ] && timeout $t python3 tools/bench_fwd_tiles.py --tiles default,128x128x12x3 --d 128 \
  --dtypes float16 --T 4096,16384 --rounds 2 --no-torch > $OUT/stages.txt 2>&1
echo "stages rc=$? at ${SECONDS}s"; tail -8 $OUT/stages.txt
echo "elapsed ${SECONDS}s"
