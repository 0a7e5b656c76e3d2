#!/usr/bin/env bash
# call 161 (NOTES v45, .ab/f16x3.patch applied on main; never run on a GPU before): float32's
# 'highest' forward as three float16 products (kernel='wgmma_f16x3', opt-in tiles). Before the
# call, in the checkout the device copies: git apply .ab/f16x3.patch on main as it is now, or
# .ab/f16x3_after_unstaged.patch once .ab/tf32_unstaged.patch is merged (the two touch the same
# lines of ops.py and tools/mutants.py; both variants were checked to apply, CPU tests pass).
# Prediction (NOTES v45): errors within 2x naive float32 (the model: 0.4-1.4x); speed at
# T = 4096-16384 130-200 TFLOP/s at d = 128 and 110-170 at d = 64, 3-5x torch's efficient
# float32 forward and 3-4x the mma.sync 'highest' (tf32x3).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 14 tests/test_wgmma_f16x3.py \
  > $OUT/tests.txt 2>&1
echo "tests rc=$?"; tail -3 $OUT/tests.txt; grep -E "^(FAILED|ERROR)" $OUT/tests.txt | head -5
(timeout 60 compute-sanitizer --tool racecheck --error-exitcode 1 python3 -c "
import numpy as np, cupy as cp, cuflash
from cuflash import TileConfig
t = TileConfig(128, 64, 12, 2, 'wgmma_f16x3'); r = np.random.default_rng(0)
f = lambda *s: cp.asarray(r.standard_normal(s).astype(np.float32))
for d in (64, 128):
    cuflash.attention(f(1, 2, 300, d), f(1, 2, 333, d), f(1, 2, 333, d), tile=t, causal=True)
    cuflash.attention(f(1, 4, 37, d), f(1, 1, 29, d), f(1, 1, 29, d), tile=t, window=(9, 3), softcap=4.0)
cp.cuda.Device().synchronize(); print('ok')" > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$?"; tail -2 $OUT/racecheck.txt)
timeout 240 python3 tools/bench_f32.py --x3 --errors --d 64 128 --T 1024 4096 16384 --reps 3 \
  --jobs 14 > $OUT/bench.txt 2>&1; echo "bench rc=$?"
timeout 60 python3 tools/mutants.py --gpu gpu_f16x3_lo_hi_dropped gpu_f16x3_p_tile_chained \
  > $OUT/mutant.txt 2>&1; echo "mutants rc=$?"; tail -3 $OUT/mutant.txt
echo "=================== SUMMARY"; grep -E "^(fwd|err) " $OUT/bench.txt | grep -E "f16x3|highest|torch_eff|naive_f32" | sort -k2,2n -k3,3n -k4,4n
