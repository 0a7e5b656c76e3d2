#!/usr/bin/env bash
# call 172 (NOTES v50, v51; .ab/base = main efb0d8d, carry [".ab/base"]): the x3 forward reading K and
# V split once per call (f16x3_stage), and the x3 backward reading q, k, v and dout split once. Its tests and the staging kernel's, racecheck, bits against
# main, ab_speed float32 'highest' forward, then ncu (stall samples per instruction) of the new one.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
BASE=$PWD/.ab/base
PYTHONPATH=$PWD timeout 150 python3 -m pytest -q -p no:cacheprovider -n 14 tests/test_f16x3_stage.py \
  tests/test_wgmma_f16x3.py > $OUT/tests.txt 2>&1; echo "tests rc=$?"; tail -1 $OUT/tests.txt
(PYTHONPATH=$BASE timeout 60 python3 .ab/x3_bits.py /tmp/base.npz; PYTHONPATH=$PWD timeout 60 python3 .ab/x3_bits.py /tmp/new.npz
 python3 -c "
import numpy as np
a, b = np.load('/tmp/base.npz'), np.load('/tmp/new.npz')
bad = [k for k in a if not np.array_equal(a[k].view(np.uint32), b[k].view(np.uint32))]
print('bits: %d arrays, differing: %s' % (len(a), bad or 'none'))
for k in bad: print(k, np.abs(a[k] - b[k]).max(), np.abs(a[k]).max())") > $OUT/bits.txt 2>&1; tail -3 $OUT/bits.txt
(PYTHONPATH=$PWD timeout 60 compute-sanitizer --tool racecheck --error-exitcode 1 python3 -c "
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
cp.cuda.Device().synchronize(); print('ok')" > $OUT/race.txt 2>&1; echo "racecheck rc=$?"; tail -1 $OUT/race.txt)
PYTHONPATH=$PWD timeout 240 python3 tools/ab_speed.py --base $BASE --new . --dtypes float32:highest --d 64,128 \
  --T 1024,4096,16384 --passes fwd --causal 0,1 --rounds 2 --json $OUT/ab.json > $OUT/ab.txt 2>&1
echo "ab rc=$?"
PYTHONPATH=$PWD timeout 150 python3 tools/ab_speed.py --base $BASE --new . --dtypes float32:highest --d 64 \
  --T 1024,4096,16384 --passes bwd --causal 0,1 --rounds 2 --json $OUT/ab_bwd.json > $OUT/ab_bwd.txt 2>&1
echo "ab bwd rc=$?"
PYTHONPATH=$PWD timeout 100 ncu --set full --import-source no -k regex:f16x3_fwd --launch-count 1 -f -o $OUT/x3 \
  python3 .ab/x3_ncu.py > $OUT/ncu_run.txt 2>&1; echo "ncu rc=$?"
ncu -i $OUT/x3.ncu-rep --page details > $OUT/details.txt 2>&1
ncu -i $OUT/x3.ncu-rep --page source --csv --print-source sass > $OUT/source.csv 2>$OUT/source.err; gzip -f $OUT/source.csv
rm -f $OUT/x3.ncu-rep
echo "=================== SUMMARY"; tail -14 $OUT/ab.txt; tail -8 $OUT/ab_bwd.txt
grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued" $OUT/details.txt | head -8
