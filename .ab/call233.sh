#!/usr/bin/env bash
# call 233 (session 46): probe of 128 x 176 forward tiles at d = 128 (.ab/arms/n176: TileConfig
# takes multiples of 16, Wgmma<176, T> generated; ws consumers 224 registers, ptxas reports 16
# bytes of spill). (1) oracle check beside the default tile at odd shapes; (2) bench_fwd_tiles
# default vs 128x176x12x2 with torch's cuDNN and FA2 in the same process, d = 128, fp16 / bf16,
# causal and not, T = 4096 and 16384, 2 rounds. carry=[".ab/arms/n176"].
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
export PYTHONPATH=$PWD/.ab/arms/n176
timeout 150 python3 .ab/n176_check.py > $OUT/check.txt 2>&1; echo "check rc=$? at ${SECONDS}s"; tail -14 $OUT/check.txt
timeout 300 python3 .ab/arms/n176/tools/bench_fwd_tiles.py --tiles default,128x176x12x2 --d 128 \
  --T 4096,16384 --rounds 2 > $OUT/bench.txt 2>&1; echo "bench rc=$? at ${SECONDS}s"
tail -30 $OUT/bench.txt
echo "elapsed ${SECONDS}s"
