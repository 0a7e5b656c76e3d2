#!/usr/bin/env bash
# call 183 (session 35; NOTES v58): staging that costs less. The working tree against main
# before it (.ab/base: git archive 82252dd cuflash kernels_cu setup.cfg tools; carry [".ab/base"]):
#  - the staging kernels' bandwidth on the new tree (.ab/stage_time.py: whole calls too);
#  - the A/B of 'tf32' forward and backward at T 2048 / 4096;
#  - the whole GPU suite on the new tree.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 100 python3 .ab/stage_time.py > $OUT/stage_time.txt 2>&1; echo "stage rc=$?" >> $OUT/side.txt
timeout 200 python3 tools/ab_speed.py --base $PWD/.ab/base --new $PWD --dtypes float32:tf32 \
  --d 64,128 --T 2048,4096 --passes fwd,bwd --causal 0,1 --rounds 2 --json $OUT/ab.json \
  > $OUT/ab.txt 2>&1; echo "ab rc=$?" >> $OUT/side.txt
STEPS="env tests" JOBS=12 LIMIT_TESTS=300 TAIL=3 OUT=/tmp/gs bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "^(FAILED|ERROR)" /tmp/gs/tests.log > $OUT/failures.txt; tail -3 /tmp/gs/tests.log >> $OUT/failures.txt
echo "=================== SUMMARY"
cat /tmp/gs/summary.txt $OUT/side.txt; head -20 $OUT/failures.txt
grep -E "stage|copy" $OUT/stage_time.txt
tail -20 $OUT/ab.txt
