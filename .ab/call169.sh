#!/usr/bin/env bash
# call 169 (NOTES v48): the x3 dK/dV kernel with every consumer thread arriving on the stage's
# empty barrier (count 128·NC) in place of one arrival per warp (.ab/x3_dkdv_thread_arrival.patch):
# does racecheck's WAR report on D (call 168) go away? Then the x3 backward's GPU tests.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 1 python3 -c "
import numpy as np, cupy as cp, cuflash
from cuflash import TileConfig
t = TileConfig(64, 128, 12, 2, 'wgmma_f16x3'); r = np.random.default_rng(0)
f = lambda *s: cp.asarray(r.standard_normal(s).astype(np.float32))
for opts in ({}, dict(causal=True)):
    q, k, v = f(1, 4, 300, 64), f(1, 2, 333, 64), f(1, 2, 333, 64)
    _, res = cuflash.attention(q, k, v, return_residuals=True, **opts)
    cuflash.attention_backward(f(1, 4, 300, 64), res, tile=t)
cp.cuda.Device().synchronize(); print('ok')" > $OUT/race.txt 2>&1
echo "racecheck rc=$?"; tail -1 $OUT/race.txt
timeout 50 python3 -m pytest -q -p no:cacheprovider -n 12 tests/test_wgmma_f16x3.py -k backward > $OUT/tests.txt 2>&1
echo "tests rc=$?"; tail -1 $OUT/tests.txt
