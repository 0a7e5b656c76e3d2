#!/usr/bin/env bash
# call 122 (next session; run `bash .ab/prep122.sh` here first, then carry .ab/arms): issue 14's
# split-KV merge arms (NOTES v29, end): the GPU split/kv tests on treeacq (the tree and the
# acq_rel counter together), µs per decode step of main / acq / tree / treeacq (2 alternating
# passes), then compute-sanitizer (kv part, 256 splits: a tree of 16 groups of 16) on treeacq.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
R=$PWD; A=$R/.ab/arms
(cd $A/treeacq && PYTHONPATH=$PWD timeout 150 python3 -m pytest -q -m gpu -n 14 -p no:cacheprovider -rfE \
  tests/test_split_kv.py tests/test_kvcache.py > $OUT/treeacq_tests.txt 2>&1); echo "treeacq tests rc=$?"
for pass in 1 2; do
  for arm in main acq tree treeacq; do
    (cd $A/$arm && PYTHONPATH=$PWD timeout 60 python3 $R/.ab/step_us.py $arm >> $OUT/ab_us.txt 2>&1); echo "$arm rc=$?"
  done
done
(cd $A/treeacq && SANITIZE_ARGS=kv LIMIT_SANITIZE=80 LIMIT_SANITIZE_WARM=150 STEPS="env sanitize" TAIL=4 \
  OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1)
echo "=================== SUMMARY"
tail -2 $OUT/treeacq_tests.txt
cat $OUT/summary.txt; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $OUT/sanitize.log
cat $OUT/ab_us.txt
