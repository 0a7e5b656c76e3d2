#!/usr/bin/env bash
# call 175 (NOTES v50-v52; .ab/base = main efb0d8d, carry [".ab/base"]): the staged x3 tree with
# the inverses by plain loads and stores (v52: call 172's racecheck reported the consumers' reads
# of cp.async-copied inverses in the forward and dQ kernels) and the `cp` fixture in conftest
# (call 172: 6 errors). The whole GPU suite; beside it bits against main, racecheck (forward d 64
# and 128 causal, dQ and dK/dV: expected clean in the forward and dQ kernels; dK/dV's per-warp
# arrival reports as at main, call 168) and the two GPU mutants; then a one-round A/B at 16384.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
BASE=$PWD/.ab/base
(PYTHONPATH=$BASE timeout 90 python3 .ab/x3_bits.py /tmp/base.npz; PYTHONPATH=$PWD timeout 90 python3 .ab/x3_bits.py /tmp/new.npz
 python3 -c "
import numpy as np
a, b = np.load('/tmp/base.npz'), np.load('/tmp/new.npz')
bad = [k for k in a if not np.array_equal(a[k].view(np.uint32), b[k].view(np.uint32))]
print('bits: %d arrays, differing: %s' % (len(a), bad or 'none'))
for k in bad: print(k, np.abs(a[k] - b[k]).max(), np.abs(a[k]).max())"
 PYTHONPATH=$PWD timeout 120 compute-sanitizer --tool racecheck --error-exitcode 1 python3 -c "
import numpy as np, cupy as cp, cuflash
from cuflash import TileConfig
t = TileConfig(128, 64, 12, 2, 'wgmma_f16x3'); r = np.random.default_rng(0)
f = lambda *s: cp.asarray(r.standard_normal(s).astype(np.float32))
for d in (64, 128):
    cuflash.attention(f(1, 2, 300, d), f(1, 2, 333, d), f(1, 2, 333, d), tile=t, causal=True)
tb = TileConfig(64, 128, 12, 2, 'wgmma_f16x3')
for opts in ({}, dict(causal=True)):
    q, k, v = f(1, 4, 300, 64), f(1, 2, 333, 64), f(1, 2, 333, 64)
    _, res = cuflash.attention(q, k, v, return_residuals=True, **opts)
    cuflash.attention_backward(f(1, 4, 300, 64), res, tile=tb)
cp.cuda.Device().synchronize(); print('ok')" > /tmp/race.txt 2>&1; echo "racecheck rc=$?"; tail -2 /tmp/race.txt
 grep "Error: Race" /tmp/race.txt | sed 's/+0x[0-9a-f]*//g' | sort | uniq -c
 head -c 20000 /tmp/race.txt > $OUT/race_head.txt
 for m in gpu_f16x3_v_unscaled gpu_f16x3_k_inverse_skipped; do
   timeout 120 python3 tools/mutants.py --gpu $m > /tmp/$m.txt 2>&1; echo "$m rc=$? $(tail -1 /tmp/$m.txt)"
 done) > $OUT/side.txt 2>&1 &
export PYTHONPATH=$PWD
STEPS="env tests" JOBS=12 LIMIT_TESTS=${LIMIT_TESTS:-430} TAIL=3 OUT=/tmp/gs bash tests/gpu_session.sh > $OUT/session.txt 2>&1
wait
grep -E "^(FAILED|ERROR)" /tmp/gs/tests.log > $OUT/failures.txt; tail -3 /tmp/gs/tests.log >> $OUT/failures.txt
timeout 60 python3 tools/ab_speed.py --base $BASE --new . --dtypes float32:highest --d 64,128 \
  --T 16384 --passes fwd,bwd --causal 0,1 --rounds 1 --json $OUT/ab.json > $OUT/ab.txt 2>&1
echo "ab rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"
cat /tmp/gs/summary.txt $OUT/side.txt
head -30 $OUT/failures.txt
tail -12 $OUT/ab.txt
