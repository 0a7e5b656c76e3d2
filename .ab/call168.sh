#!/usr/bin/env bash
# call 168 (NOTES v48): what the sanitizer's 3 hazards in the x3 dK/dV kernel are. Racecheck with
# every report (threads, blocks) on the dense d = 64 case alone, then the cubin CuPy built for
# that kernel (its kernel cache) copied out, to disassemble here (nvdisasm -c) at the offsets.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export CUPY_CACHE_DIR=$OUT/cache_tmp
timeout 150 compute-sanitizer --tool racecheck --racecheck-report all --print-limit 40 \
  --error-exitcode 1 python3 -c "
import numpy as np, cupy as cp, cuflash
from cuflash import TileConfig
t = TileConfig(64, 128, 12, 2, 'wgmma_f16x3'); r = np.random.default_rng(0)
f = lambda *s: cp.asarray(r.standard_normal(s).astype(np.float32))
q, k, v = f(1, 4, 300, 64), f(1, 2, 333, 64), f(1, 2, 333, 64)
_, res = cuflash.attention(q, k, v, return_residuals=True)
cuflash.attention_backward(f(1, 4, 300, 64), res, tile=t)
cp.cuda.Device().synchronize(); print('ok')" > $OUT/race.txt 2>&1
echo "racecheck rc=$?"
n=0; for f in $(grep -l "cuflash_wgmma_f16x3_bwd_dkdv_f32_d64_m64_n128_w12_s2" -r $OUT/cache_tmp 2>/dev/null); do
  cp $f $OUT/dkdv_$n.bin; n=$((n+1)); done
rm -rf $OUT/cache_tmp
python3 -c "import cupy; from cupy_backends.cuda.libs import nvrtc; print('nvrtc', nvrtc.getVersion())" > $OUT/nvrtc.txt 2>&1
echo "=================== SUMMARY"
cat $OUT/nvrtc.txt; ls -la $OUT; grep -c "Race reported" $OUT/race.txt; head -60 $OUT/race.txt
