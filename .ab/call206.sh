#!/usr/bin/env bash
# call 206 (session 40, v69; carry .ab/base = f5249a3's tree): 1. the whole GPU suite at this
# tree; 2. ab_speed of the new 16-bit defaults at d = 64 against f5249a3 (float16, forward and
# backward, T 2048 / 8192 / 16384); 3. bench_fwd_tiles default beside cuDNN / FA2 at d = 64,
# forward (T 2048-16384) for the README. Prediction: NOTES v69. Timeouts sum to 585 s.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=12 LIMIT_TESTS=280 TAIL=3 OUT=$OUT/gs bash tests/gpu_session.sh > $OUT/suite.txt 2>&1
echo "suite rc=$?" >> $OUT/side.txt
timeout 190 python3 tools/ab_speed.py --base $PWD/.ab/base --new $PWD --dtypes float16 --d 64 \
  --T 2048,8192,16384 --passes fwd,bwd --causal 0,1 --rounds 2 --json $OUT/ab.json \
  > $OUT/ab.txt 2>&1; echo "ab rc=$?" >> $OUT/side.txt
timeout 100 python3 tools/bench_fwd_tiles.py --tiles default --d 64 --T 2048,4096,8192,16384 \
  --rounds 2 --reps 5 --json $OUT/fwd.json > $OUT/fwd.txt 2>&1; echo "fwd rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"; cat $OUT/side.txt; tail -4 $OUT/gs/tests.log
grep -E "^FAILED|^ERROR" $OUT/gs/tests.log | head; tail -14 $OUT/ab.txt; tail -17 $OUT/fwd.txt
