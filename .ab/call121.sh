#!/usr/bin/env bash
# call 121: compute-sanitizer over the decode path at main (tests/sanitize.py kv, now with 256
# forced splits: the v29b merge's batches); then .ab/var (split_combine.cuh's counter as one
# acq_rel atomic by thread 0 after the barrier, no __threadfence per thread) against main on
# small/medium decode steps (2 passes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
SANITIZE_ARGS=kv LIMIT_SANITIZE=80 LIMIT_SANITIZE_WARM=120 STEPS="env sanitize" TAIL=4 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
for pass in 1 2; do
  timeout 60 python3 .ab/step_us.py main >> $OUT/ab_us.txt 2>&1; echo "main rc=$?"
  (cd .ab/var && PYTHONPATH=$PWD timeout 60 python3 ../step_us.py var >> $OUT/ab_us.txt 2>&1); echo "var rc=$?"
done
echo "=================== SUMMARY"
cat $OUT/summary.txt; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $OUT/sanitize.log
cat $OUT/ab_us.txt
