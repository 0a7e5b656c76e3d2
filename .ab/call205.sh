#!/usr/bin/env bash
# call 205 (session 40, v68): the 16-bit warp-specialized forward on one consumer warpgroup (8
# warps, two blocks a multiprocessor; opt-in by name). 1. a hang guard; 2. its GPU tests (and
# v66's 8-warp backward's); 3. bench_fwd_tiles forward: default, 64x128x8x2, 64x64x8x2 beside
# cuDNN / FA2, d 64 / 128, T 2048-16384; 4. v66's backward at T = 1024 / 8192 (d = 64) for a
# length rule. Prediction: NOTES v68. Timeouts sum to 560 s.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/env.txt
timeout 60 python3 - > $OUT/guard.txt 2>&1 <<'PY'
import cupy as cp, numpy as np, cuflash
from cuflash.tile import TileConfig
rng = cp.random.default_rng(0)
for d, n in ((64, 128), (128, 64)):
    q, k, v = (rng.standard_normal((2, 8, 700, d), dtype=cp.float32).astype(cp.float16) for _ in range(3))
    o = cuflash.attention(q, k, v, causal=True, tile=TileConfig(64, n, 8, 2, "wgmma"))
    r = cuflash.attention(q, k, v, causal=True); cp.cuda.runtime.deviceSynchronize()
    print("guard ok", d, float(cp.abs(o.astype(cp.float32) - r.astype(cp.float32)).max()))
PY
rc=$?; echo "guard rc=$rc" >> $OUT/side.txt; tail -3 $OUT/guard.txt
if [ $rc -ne 0 ]; then echo "guard failed: stopping"; cat $OUT/side.txt; exit 1; fi
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu -n 12 tests/test_gpu_kernels.py \
  -k "w8" -rfE > $OUT/tests.txt 2>&1; echo "tests rc=$?" >> $OUT/side.txt
timeout 250 python3 tools/bench_fwd_tiles.py --tiles default,64x128x8x2,64x64x8x2 --d 64,128 \
  --T 2048,4096,8192,16384 --rounds 3 --reps 5 --json $OUT/fwd.json > $OUT/fwd.txt 2>&1
echo "fwd rc=$?" >> $OUT/side.txt
timeout 120 python3 tools/bench_fwd_tiles.py --pass bwd --d 64 --T 1024,8192 \
  --tiles default,64x64x8x2 --rounds 3 --reps 5 --json $OUT/bwd.json > $OUT/bwd.txt 2>&1
echo "bwd rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"; cat $OUT/side.txt; tail -2 $OUT/tests.txt
grep -E "FAILED|ERROR" $OUT/tests.txt | head; tail -34 $OUT/fwd.txt; tail -9 $OUT/bwd.txt
