#!/usr/bin/env bash
# call 179 as run (the device budget after two refused starts): the A/B of v57 against a12f798
# (.ab/base; carry [".ab/base"]) and the whole GPU suite on this tree; bench_f32's torch ratio
# dropped.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 140 python3 tools/ab_speed.py --base $PWD/.ab/base --new $PWD --dtypes float32:tf32 \
  --d 128 --T 2048,4096,16384 --passes bwd --causal 0,1 --rounds 2 --json $OUT/ab.json \
  > $OUT/ab.txt 2>&1; echo "ab rc=$?" >> $OUT/side.txt
STEPS="env tests" JOBS=12 LIMIT_TESTS=300 TAIL=3 OUT=/tmp/gs bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "^(FAILED|ERROR)" /tmp/gs/tests.log > $OUT/failures.txt; tail -3 /tmp/gs/tests.log >> $OUT/failures.txt
echo "=================== SUMMARY"
cat /tmp/gs/summary.txt $OUT/side.txt; head -20 $OUT/failures.txt
tail -25 $OUT/ab.txt
