#!/usr/bin/env bash
# call 176 (NOTES v52; carry [".ab/base"], main efb0d8d's code): the staged x3 kernels with their
# full barriers split in two (CopiesAndStores: cp.async copies / plain scale stores; call 175's
# single barrier counting both kept racecheck's 16 reports). Racecheck (expected: the forward and
# dQ kernels clean, dK/dV's per-warp-arrival reports as at main), the x3 and staging tests, the
# GPU mutant of the scales, bits against main; then issue 15's ratios against torch (call 173).
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
BASE=$PWD/.ab/base
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
(PYTHONPATH=$PWD timeout 120 compute-sanitizer --tool racecheck --error-exitcode 1 python3 -c "
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
 PYTHONPATH=$BASE timeout 90 python3 .ab/x3_bits.py /tmp/base.npz; PYTHONPATH=$PWD timeout 90 python3 .ab/x3_bits.py /tmp/new.npz
 python3 -c "
import numpy as np
a, b = np.load('/tmp/base.npz'), np.load('/tmp/new.npz')
bad = [k for k in a if not np.array_equal(a[k].view(np.uint32), b[k].view(np.uint32))]
print('bits: %d arrays, differing: %s' % (len(a), bad or 'none'))"
 timeout 120 python3 tools/mutants.py --gpu gpu_f16x3_k_inverse_skipped > /tmp/m.txt 2>&1; echo "mutant rc=$? $(tail -1 /tmp/m.txt)"
) > $OUT/side.txt 2>&1 &
PYTHONPATH=$PWD timeout 120 python3 -m pytest -q -p no:cacheprovider -n 12 -m gpu tests/test_f16x3_stage.py \
  tests/test_wgmma_f16x3.py > $OUT/tests.txt 2>&1; echo "tests rc=$?" > $OUT/tests_rc.txt
wait
export PYTHONPATH=$PWD
timeout 170 python3 tools/bench_f32.py --x3 --errors --d 64 128 --T 2048 4096 16384 --reps 3 \
  --jobs 14 > $OUT/bench_fwd.txt 2>&1; echo "bench fwd rc=$?" >> $OUT/side.txt
timeout 110 python3 tools/bench_f32.py --pass bwd --x3 --d 64 --T 2048 4096 16384 \
  --reps 3 --jobs 14 > $OUT/bench_bwd.txt 2>&1; echo "bench bwd rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"
cat $OUT/env.txt $OUT/side.txt $OUT/tests_rc.txt; tail -1 $OUT/tests.txt; grep -E "^(FAILED|ERROR)" $OUT/tests.txt | head
grep -E "^(fwd|bwd) " $OUT/bench_fwd.txt $OUT/bench_bwd.txt | grep -E "f16x3|torch_eff|naive_f32|cuflash_highest" | sort -k2,2n -k3,3n -k4,4n | head -60
