#!/usr/bin/env bash
# call 207 (session 40): compute-sanitizer over the one-consumer 16-bit defaults at d <= 64
# (tests/sanitize.py's new Hopper case: bfloat16, d = 64, forward 64x128x8x2, backward 64x64x8x2;
# dense, causal, window + softcap + ALiBi, mask_mod, split-KV, GQA in two ranks, a strided view,
# a packed batch; both dQ modes). Timeouts sum to 160 s (the session's budget: ~250 s).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 75 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tests/sanitize.py case bfloat16 64 \
  > $OUT/memcheck.txt 2>&1; echo "memcheck rc=$?" >> $OUT/side.txt
timeout 85 compute-sanitizer --tool racecheck --error-exitcode 1 python3 tests/sanitize.py case bfloat16 64 \
  > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$?" >> $OUT/side.txt
cat $OUT/side.txt; grep -c "^ok" $OUT/memcheck.txt $OUT/racecheck.txt; tail -4 $OUT/memcheck.txt
tail -6 $OUT/racecheck.txt
