#!/usr/bin/env bash
# call 174 (NOTES v50-v51, the budget after nine refused starts): the staged x3 tree's own tests,
# bits against main (.ab/base = efb0d8d, carry it), racecheck, and the A/B at T = 4096 / 16384.
# No whole suite: a merge waits for it (call 172's script).
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
BASE=$PWD/.ab/base
PYTHONPATH=$PWD timeout 100 python3 -m pytest -q -p no:cacheprovider -n 14 tests/test_f16x3_stage.py \
  tests/test_wgmma_f16x3.py > $OUT/tests.txt 2>&1; echo "tests rc=$?" > $OUT/side.txt
(PYTHONPATH=$BASE timeout 60 python3 .ab/x3_bits.py /tmp/base.npz & PYTHONPATH=$PWD timeout 60 python3 .ab/x3_bits.py /tmp/new.npz; wait
 python3 -c "
import numpy as np
a, b = np.load('/tmp/base.npz'), np.load('/tmp/new.npz')
bad = [k for k in a if not np.array_equal(a[k].view(np.uint32), b[k].view(np.uint32))]
print('bits: %d arrays, differing: %s' % (len(a), bad or 'none'))
for k in bad: print(k, np.abs(a[k] - b[k]).max(), np.abs(a[k]).max())") >> $OUT/side.txt 2>&1
export PYTHONPATH=$PWD
timeout 70 python3 tools/ab_speed.py --base $BASE --new . --dtypes float32:highest --d 64,128 \
  --T 4096,16384 --passes fwd --causal 0,1 --rounds 1 --json $OUT/ab.json > $OUT/ab.txt 2>&1
echo "ab rc=$?" >> $OUT/side.txt
timeout 45 python3 tools/ab_speed.py --base $BASE --new . --dtypes float32:highest --d 64 \
  --T 4096,16384 --passes bwd --causal 0,1 --rounds 1 --json $OUT/ab_bwd.json > $OUT/ab_bwd.txt 2>&1
echo "ab bwd rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"
cat $OUT/side.txt; tail -1 $OUT/tests.txt; grep -E "^FAILED" $OUT/tests.txt | head
tail -10 $OUT/ab.txt; tail -6 $OUT/ab_bwd.txt
