#!/usr/bin/env bash
# call 162 (NOTES v46, .ab/f16x3_bwd.patch; never run on a GPU before): float32's 'highest'
# backward as three float16 products at d <= 64 (kernel='wgmma_f16x3', the deterministic pair
# DkdvWgmmaX3 / DqWgmmaX3, opt-in backward tiles 64x128x12x2 and x3). Before the call, in the
# checkout the device copies: git apply .ab/f16x3.patch, then .ab/f16x3_bwd.patch; or, once
# .ab/tf32_unstaged.patch is merged, .ab/f16x3_after_unstaged.patch, then
# .ab/f16x3_bwd_after_unstaged.patch (both stacks checked to apply, the CPU suite passes on
# each). If call 161 merged the forward already, only the last one of its stack.
# Prediction (NOTES v46): dq, dk, dv within the criterion (the model's fresh/tile: <= 0.35 of the
# tests' bound, <= 2.3x the tiled float32 backward's error); speed at d = 64, T = 4096-16384:
# 55-90 TFLOP/s, 1.6-2.6x torch's efficient float32 backward and 1.9-3.1x the mma.sync
# 'highest' pair (tf32x3, 28-29); the 16-bit pair's 256-347 over three products' work is the
# ceiling (85-116).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
timeout 180 python3 -m pytest -q -p no:cacheprovider -n 14 tests/test_wgmma_f16x3.py \
  > $OUT/tests.txt 2>&1
echo "tests rc=$?"; tail -3 $OUT/tests.txt; grep -E "^(FAILED|ERROR)" $OUT/tests.txt | head -5
(timeout 90 compute-sanitizer --tool racecheck --error-exitcode 1 python3 -c "
import numpy as np, cupy as cp, cuflash
from cuflash import TileConfig
t = TileConfig(64, 128, 12, 2, 'wgmma_f16x3'); r = np.random.default_rng(0)
f = lambda *s: cp.asarray(r.standard_normal(s).astype(np.float32))
for d, opts in ((64, dict(causal=True)), (40, dict(window=(9, 3), softcap=4.0))):
    q, k, v = f(1, 4, 300, d), f(1, 2, 333, d), f(1, 2, 333, d)
    _, res = cuflash.attention(q, k, v, return_residuals=True, **opts)
    cuflash.attention_backward(f(1, 4, 300, d), res, tile=t)
cp.cuda.Device().synchronize(); print('ok')" > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$?"; tail -2 $OUT/racecheck.txt)
timeout 240 python3 tools/bench_f32.py --pass bwd --x3 --d 64 --T 2048 4096 8192 16384 \
  --reps 3 --jobs 14 > $OUT/bench.txt 2>&1; echo "bench rc=$?"
timeout 150 python3 tools/mutants.py --gpu gpu_f16x3_bwd_dv_column_factor gpu_f16x3_bwd_dk_row_scale \
  gpu_f16x3_bwd_dq_column_factor gpu_f16x3_bwd_quad_max > $OUT/mutant.txt 2>&1
echo "mutants rc=$?"; tail -5 $OUT/mutant.txt
echo "=================== SUMMARY"; grep -E "^bwd " $OUT/bench.txt | sort -k2,2n -k3,3n -k4,4n
