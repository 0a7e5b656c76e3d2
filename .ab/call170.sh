#!/usr/bin/env bash
# call 170 (NOTES v48; after bash .ab/prep170.sh, carry [".ab/arms/x3arrive"]): the whole GPU
# suite with .ab/defaults_v48.patch applied ('highest''s x3 kernels from 512 keys, 'tf32''s wide
# tile from 4096 keys at 128 < d <= 256), and beside it, on the arm with every consumer thread
# arriving on the x3 dK/dV kernel's empty barrier: racecheck (call 168's reports gone?) and the
# x3 backward's GPU tests. Merge the defaults if the suite passes; the arm if racecheck is clean
# and its tests pass (then the whole suite once more, or in the same session's next call).
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
ARM=$PWD/.ab/arms/x3arrive
(cd $ARM && PYTHONPATH=$ARM timeout 120 compute-sanitizer --tool racecheck --error-exitcode 1 python3 -c "
import numpy as np, cupy as cp, cuflash
from cuflash import TileConfig
t = TileConfig(64, 128, 12, 2, 'wgmma_f16x3'); r = np.random.default_rng(0)
f = lambda *s: cp.asarray(r.standard_normal(s).astype(np.float32))
for opts in ({}, dict(causal=True)):
    q, k, v = f(1, 4, 300, 64), f(1, 2, 333, 64), f(1, 2, 333, 64)
    _, res = cuflash.attention(q, k, v, return_residuals=True, **opts)
    cuflash.attention_backward(f(1, 4, 300, 64), res, tile=t)
cp.cuda.Device().synchronize(); print('ok')" > $OUT/arm_race.txt 2>&1; echo "arm racecheck rc=$?" >> $OUT/arm.txt
 PYTHONPATH=$ARM timeout 150 python3 -m pytest -q -p no:cacheprovider -n 2 tests/test_wgmma_f16x3.py \
   -k backward > $OUT/arm_tests.txt 2>&1; echo "arm tests rc=$?" >> $OUT/arm.txt) &
export PYTHONPATH=$PWD
STEPS="env tests" JOBS=12 LIMIT_TESTS=${LIMIT_TESTS:-420} TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
wait
echo "=================== SUMMARY"
cat $OUT/summary.txt $OUT/arm.txt; tail -1 $OUT/arm_race.txt; tail -1 $OUT/arm_tests.txt
grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -20; tail -1 $OUT/tests.log
