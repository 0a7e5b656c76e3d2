#!/usr/bin/env bash
# call 200 (next session, v64): the float16-product tiles of one consumer warpgroup, two blocks a
# multiprocessor (wgmma_f16x3_tiles(num_warps=8); opt-in by name). 1. their GPU tests (x1 / x3
# files: forward every 8-warp tile, backward d = 64 / 128, every variant under GQA); 2.
# bench_f32 --x3 --two-blocks, forward and backward, d 64 / 128, T 2048 / 4096 / 16384 (the
# 8-warp tiles by name beside the 12-warp ones and 'tf32''s default, torch's efficient float32 in
# the same run); 3. the block timeline of the 8-warp kernels and of the 16-bit forward
# (.ab/prof.patch, .ab/prof_run.py; issue 13's short lengths).
# Prediction (NOTES v64): backward d = 64 8-warp / 12-warp +8-12% at T = 2048 causal, +5-8%
# non-causal, -2..+2% at 16384; forward d = 128 +5-10% at T = 2048 causal, -5..-10% at 16384
# (K/V re-read per 64 queries: L2 traffic doubles). Timeouts sum to 580 s with the guard (the call limit: 600).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/env.txt
# a hang guard first (a wrong register split hangs setmaxnreg: NOTES v17): one 8-warp x1 forward
# and backward, 60 s; stop the call if it hangs
timeout 60 python3 - > $OUT/guard.txt 2>&1 <<'PY'
import cupy as cp, cuflash
from cuflash.tile import wgmma_f16x3_tiles
rng = cp.random.default_rng(0)
q, k, v, do = (rng.standard_normal((2, 8, 700, 64), dtype=cp.float32) for _ in range(4))
f = wgmma_f16x3_tiles(64, False, "wgmma_f16x1", num_warps=8)[0]
b = wgmma_f16x3_tiles(64, True, "wgmma_f16x1", num_warps=8)[0]
o, res = cuflash.attention(q, k, v, causal=True, tile=f, return_residuals=True)
g = cuflash.attention_backward(do, res, tile=b); cp.cuda.runtime.deviceSynchronize()
print("guard ok", float(cp.abs(o).max()), [float(cp.abs(x).max()) for x in g])
PY
rc=$?; echo "guard rc=$rc" >> $OUT/side.txt; tail -3 $OUT/guard.txt
if [ $rc -ne 0 ]; then echo "guard failed: stopping"; cat $OUT/side.txt; exit 1; fi
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu -n 12 tests/test_wgmma_f16x1.py \
  tests/test_wgmma_f16x3.py -rfE > $OUT/tests.txt 2>&1; echo "tests rc=$?" >> $OUT/side.txt
timeout 150 python3 tools/bench_f32.py --pass bwd --x3 --two-blocks --d 64 128 \
  --T 2048 4096 16384 --reps 3 --jobs 14 > $OUT/bench_bwd.txt 2>&1; echo "bwd rc=$?" >> $OUT/side.txt
timeout 130 python3 tools/bench_f32.py --x3 --two-blocks --d 64 128 --T 2048 4096 16384 \
  --reps 3 --jobs 14 > $OUT/bench_fwd.txt 2>&1; echo "fwd rc=$?" >> $OUT/side.txt
git apply .ab/prof.patch && {   # the block timelines: the 8-warp x1 pair; the 16-bit forward
  CUFLASH_PROF=1 CUFLASH_CACHE_DIR=/tmp/profcache PROF_TILES=w8 PROF_CELLS=fwd,bwd \
    timeout 60 python3 .ab/prof_run.py > $OUT/prof_w8.txt 2>&1; echo "prof w8 rc=$?" >> $OUT/side.txt
  CUFLASH_PROF=1 CUFLASH_CACHE_DIR=/tmp/profcache PROF_DTYPE=float16 PROF_CELLS=fwd,bwd \
    timeout 60 python3 .ab/prof_run.py > $OUT/prof_f16.txt 2>&1; echo "prof f16 rc=$?" >> $OUT/side.txt
  git apply -R .ab/prof.patch; }
echo "=================== SUMMARY"; cat $OUT/side.txt; tail -2 $OUT/tests.txt
grep -hE "^##|^cuflash|ready|share|  s:" $OUT/prof_w8.txt $OUT/prof_f16.txt
grep -E "FAILED|ERROR" $OUT/tests.txt | head
for f in bwd fwd; do grep -E " (tf32|wgmma_f16x1_m[0-9]+_n[0-9]+_w(8|12)_s2|torch_eff) " \
  $OUT/bench_$f.txt | awk '{print $1,$2,$3,$4,$5,$6,$7}'; done
