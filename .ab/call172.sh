#!/usr/bin/env bash
# call 172 (NOTES v50, v51; .ab/base = main efb0d8d, carry [".ab/base"]): the x3 kernels reading
# rows split once per call (f16x3_stage). The whole GPU suite on this tree and, beside it, the
# bits against main (forward and backward), racecheck and the two new GPU mutants; then ab_speed float32 'highest'
# forward (d 64, 128) and backward (d 64), with nothing else running.
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
 PYTHONPATH=$PWD timeout 90 compute-sanitizer --tool racecheck --error-exitcode 1 python3 -c "
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
cp.cuda.Device().synchronize(); print('ok')" > $OUT/race.txt 2>&1; echo "racecheck rc=$?"; tail -2 $OUT/race.txt
 for m in gpu_f16x3_v_unscaled gpu_f16x3_k_inverse_skipped; do
   timeout 120 python3 tools/mutants.py --gpu $m > /tmp/$m.txt 2>&1; echo "$m rc=$? $(tail -1 /tmp/$m.txt)"
 done) > $OUT/side.txt 2>&1 &
export PYTHONPATH=$PWD
STEPS="env tests" JOBS=12 LIMIT_TESTS=${LIMIT_TESTS:-320} TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
wait
timeout 70 python3 tools/ab_speed.py --base $BASE --new . --dtypes float32:highest --d 64,128 \
  --T 4096,16384 --passes fwd --causal 0,1 --rounds 1 --json $OUT/ab.json > $OUT/ab.txt 2>&1
echo "ab rc=$?" >> $OUT/side.txt
timeout 45 python3 tools/ab_speed.py --base $BASE --new . --dtypes float32:highest --d 64 \
  --T 4096,16384 --passes bwd --causal 0,1 --rounds 1 --json $OUT/ab_bwd.json > $OUT/ab_bwd.txt 2>&1
echo "ab bwd rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"
cat $OUT/summary.txt $OUT/side.txt
grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -20; tail -1 $OUT/tests.log
tail -14 $OUT/ab.txt; tail -8 $OUT/ab_bwd.txt
