#!/usr/bin/env bash
# call 145 (next session, branch wgmma-tf32, never run on a GPU): float32's forward of
# precision='tf32' on Hopper's wgmma (kernels_cu/flash_fwd_wgmma_tf32.cu, kernel='wgmma_tf32',
# opt-in; NOTES v36). One device call:
#   bash .ab/call145.sh   its GPU tests first (a wrong fragment order or descriptor shows there,
#                         against the oracle), the GPU mutants, then its speed beside the mma.sync
#                         'tf32' kernel and torch's efficient float32 (bench_f32 --wgmma), and
#                         its tile ablation at T = 4096; then the 16-bit forward A/B'd against
#                         main (.ab/base = `git archive main cuflash kernels_cu setup.cfg | tar
#                         -x -C .ab/base`, carried): the branch moved WgmmaFwdRows' mask and
#                         softmax into wgmma_tile_probs (shared with the TF32 kernel), which
#                         changed the SASS of 61 of 90 16-bit wgmma forwards (the warp-specialized
#                         ones; the order of the same instructions). Prediction: 0.99-1.01.
# Last, the float64 and float32 GEMM ceilings (cupy 8192^3): GPU.md has none for float64, and
# issue 15's float64 backward bar (2x torch's math path, which ran 35-41 TFLOP/s at d = 128)
# may lie above the H200's float64 tensor peak (67 TFLOP/s on the datasheet); NOTES v35.
# Prediction (NOTES v36): d = 128 150-200 TFLOP/s against the mma 'tf32' kernel's 92-116
# (1.4-1.8x) at T = 16384, d = 64 140-190 against 110-144; at T = 1024 about half that (the
# staging kernel's one pass over k and v, ~0.15 ms, against the attention kernel's ~0.2 ms).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 40 python3 -c "
import cupy as cp, statistics
from cuflash.experiments import gputime
for dt in (cp.float64, cp.float32):
    a = cp.random.standard_normal((8192, 8192)).astype(dt); b = a.copy()
    ms = statistics.median(gputime.gpu_times(lambda: a @ b, 5, 2))
    print(f'matmul 8192^3 {cp.dtype(dt).name}: {2 * 8192**3 / ms / 1e9:.1f} TFLOP/s')
" > $OUT/gemm.txt 2>&1; echo "gemm rc=$?"   # the float64 ceiling GPU.md lacks (issue 15's bar)
timeout 40 python3 -c "
import numpy as np, cupy as cp, cuflash
from cuflash import TileConfig
rng = np.random.default_rng(0)
q, k, v = (cp.asarray(rng.standard_normal((1, 2, 300, 128)).astype(np.float32)) for _ in range(3))
out = cuflash.attention(q, k, v, causal=True, tile=TileConfig(128, 64, 8, 2, 'wgmma_tf32'))
ref = cuflash.naive_attention(q, k, v, causal=True, precision='tf32')
print('smoke max |out - naive tf32| / max |naive|', float(abs(out - ref).max() / abs(ref).max()))
" > $OUT/smoke.txt 2>&1; echo "smoke rc=$?"; cat $OUT/smoke.txt | tail -3
grep -q "smoke max" $OUT/smoke.txt || { echo "the kernel did not run: the rest would only wait out its timeouts"; cat $OUT/gemm.txt; exit 1; }
timeout 130 python3 -m pytest -q -m gpu -n 14 -p no:cacheprovider -rfE -x tests/test_wgmma_tf32.py \
  > $OUT/tests.txt 2>&1; echo "tests rc=$?"; tail -4 $OUT/tests.txt
timeout 90 python3 tools/mutants.py --gpu gpu_wgmma_tf32_slot_order gpu_wgmma_tf32_q_truncated \
  > $OUT/mutants.txt 2>&1; echo "mutants rc=$?"
timeout 130 python3 tools/bench_f32.py --wgmma --d 64 128 --T 1024 4096 16384 --reps 3 --jobs 14 \
  > $OUT/bench.txt 2>&1; echo "bench rc=$?"
timeout 80 python3 tools/bench_f32.py --wgmma --d 64 128 --T 4096 --causal no --reps 3 --jobs 14 \
  --tiles --families wgmma_tf32 --no-torch > $OUT/tiles.txt 2>&1; echo "tiles rc=$?"
timeout 90 python3 tools/ab_speed.py --base .ab/base --new . --passes fwd --T 4096,16384 --rounds 1 \
  > $OUT/ab_fwd16.txt 2>&1; echo "ab rc=$?"
echo "=================== SUMMARY"; grep -E "passed|failed" $OUT/tests.txt | tail -2
tail -3 $OUT/mutants.txt; grep -E "tf32|torch" $OUT/bench.txt | grep -v "^#" | tail -30
grep wgmma $OUT/tiles.txt | tail -8
tail -3 $OUT/ab_fwd16.txt

cat $OUT/gemm.txt
