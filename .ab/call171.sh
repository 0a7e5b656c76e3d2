#!/usr/bin/env bash
# call 171 (NOTES v49; .ab/x3_no_turns.patch applied on main, .ab/base built from main's tree:
#   rm -rf .ab/base && mkdir -p .ab/base && git archive HEAD cuflash kernels_cu setup.cfg tools | tar -x -C .ab/base
# and carry [".ab/base"]): the x3 forward without the consumers' turns, A/B against main on
# float32 'highest' (the x3 forward is its default on sm_90 from 1024 keys), its tests, racecheck.
# Prediction (NOTES v49): +30-80% at T >= 4096, both d.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 14 tests/test_wgmma_f16x3.py -k "not backward" \
  > $OUT/tests.txt 2>&1; echo "tests rc=$?"; tail -1 $OUT/tests.txt
(timeout 60 compute-sanitizer --tool racecheck --error-exitcode 1 python3 -c "
import numpy as np, cupy as cp, cuflash
from cuflash import TileConfig
t = TileConfig(128, 64, 12, 2, 'wgmma_f16x3'); r = np.random.default_rng(0)
f = lambda *s: cp.asarray(r.standard_normal(s).astype(np.float32))
for d in (64, 128):
    cuflash.attention(f(1, 2, 300, d), f(1, 2, 333, d), f(1, 2, 333, d), tile=t, causal=True)
cp.cuda.Device().synchronize(); print('ok')" > $OUT/race.txt 2>&1; echo "racecheck rc=$?"; tail -1 $OUT/race.txt)
timeout 240 python3 tools/ab_speed.py --base .ab/base --new . --dtypes float32:highest --d 64,128 \
  --T 1024,4096,16384 --passes fwd --causal 0,1 --rounds 2 --json $OUT/ab.json > $OUT/ab.txt 2>&1
echo "ab rc=$?"
echo "=================== SUMMARY"; tail -16 $OUT/ab.txt
