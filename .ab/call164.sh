#!/usr/bin/env bash
# call 164 (NOTES v48): the whole GPU suite on the stack of four patches never run on a GPU
# (.ab/tf32_unstaged.patch, .ab/f16x3_after_unstaged.patch, .ab/f16x3_bwd_after_unstaged.patch,
# .ab/tf32_wide.patch, applied in that order on main 2da3564), with racecheck of the three new
# kernel kinds beside it (the unstaged ws TF32 forward, the x3 forward, the x3 backward pair).
# Each patch adds its own tests (test_wgmma_tf32.py's unstaged cases, test_wgmma_f16x3.py,
# test_wgmma_tf32_wide.py), so a failure names its patch.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
rc() { echo "$1 rc=$2" >> $OUT/rcs.txt; }
(timeout 150 compute-sanitizer --tool racecheck --error-exitcode 1 python3 tests/sanitize.py case float32 128 \
  > $OUT/race_unstaged.txt 2>&1; rc race_unstaged $?) &
(timeout 150 compute-sanitizer --tool racecheck --error-exitcode 1 python3 -c "
import numpy as np, cupy as cp, cuflash
from cuflash import TileConfig
t = TileConfig(128, 64, 12, 2, 'wgmma_f16x3'); r = np.random.default_rng(0)
f = lambda *s: cp.asarray(r.standard_normal(s).astype(np.float32))
for d in (64, 128):
    cuflash.attention(f(1, 2, 300, d), f(1, 2, 333, d), f(1, 2, 333, d), tile=t, causal=True)
    cuflash.attention(f(1, 4, 37, d), f(1, 1, 29, d), f(1, 1, 29, d), tile=t, window=(9, 3), softcap=4.0)
cp.cuda.Device().synchronize(); print('ok')" > $OUT/race_x3fwd.txt 2>&1; rc race_x3fwd $?) &
(timeout 150 compute-sanitizer --tool racecheck --error-exitcode 1 python3 -c "
import numpy as np, cupy as cp, cuflash
from cuflash import TileConfig
t = TileConfig(64, 128, 12, 2, 'wgmma_f16x3'); r = np.random.default_rng(0)
f = lambda *s: cp.asarray(r.standard_normal(s).astype(np.float32))
for d, opts in ((64, dict(causal=True)), (40, dict(window=(9, 3), softcap=4.0))):
    q, k, v = f(1, 4, 300, d), f(1, 2, 333, d), f(1, 2, 333, d)
    _, res = cuflash.attention(q, k, v, return_residuals=True, **opts)
    cuflash.attention_backward(f(1, 4, 300, d), res, tile=t)
cp.cuda.Device().synchronize(); print('ok')" > $OUT/race_x3bwd.txt 2>&1; rc race_x3bwd $?) &
STEPS="env tests" JOBS=13 LIMIT_TESTS=420 TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
wait
echo "=================== SUMMARY"
cat $OUT/summary.txt $OUT/rcs.txt; for f in $OUT/race_*.txt; do echo "$f: $(tail -1 $f)"; done
grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -20; tail -1 $OUT/tests.log
