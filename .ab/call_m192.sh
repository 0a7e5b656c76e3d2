#!/usr/bin/env bash
# Probe (prepared in session 49, for issue 13): the d = 64 forward on 192 x 128 tiles, three
# consumer warpgroups of 160 registers and a producer of 32 (FlashAttention-3's d = 64 tile).
# Apply .ab/m192_probe.patch to the tree first (it only allows the tile; defaults unchanged).
# NVRTC sm_90a (session 49): consumers without a spill; 116 bytes of spill in the cp.async
# producer that runs only where the host made no tensor maps.
#   check   .ab/n176_check.py 64 192x128x16x2: output and lse against a float64 oracle beside the default tile
#   speed   bench_fwd_tiles default vs 192x128x16x2, d = 64, float16 and bfloat16, T = 2048-16384,
#           causal and not, cuDNN beside them
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-300}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
timeout 120 python3 .ab/n176_check.py 64 192x128x16x2 > $OUT/check.txt 2>&1; echo "check rc=$? at ${SECONDS}s"; tail -3 $OUT/check.txt
t=$((L - SECONDS - 5))
[ $t -gt 40 ] && timeout $t python3 tools/bench_fwd_tiles.py --tiles default,192x128x16x2 --d 64 \
  --dtypes float16,bfloat16 --T 2048,4096,8192,16384 --rounds 2 > $OUT/speed.txt 2>&1
echo "speed rc=$? at ${SECONDS}s"; tail -20 $OUT/speed.txt
