#!/usr/bin/env bash
# call 173 (after 172, on the staged tree): the x3 kernels against torch's efficient float32 in
# one process per pass (issue 15's bar: 'highest' >= 2.5x, d = 64 / 128, T = 2048..16384).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
timeout 200 python3 tools/bench_f32.py --x3 --errors --d 64 128 --T 2048 4096 16384 --reps 3 \
  --jobs 14 > $OUT/bench_fwd.txt 2>&1; echo "bench fwd rc=$?"
timeout 150 python3 tools/bench_f32.py --pass bwd --x3 --d 64 --T 2048 4096 16384 \
  --reps 3 --jobs 14 > $OUT/bench_bwd.txt 2>&1; echo "bench bwd rc=$?"
echo "=================== SUMMARY"
grep -E "^(fwd|bwd) " $OUT/bench_fwd.txt $OUT/bench_bwd.txt | grep -E "f16x3|torch_eff|naive_f32|cuflash_highest" | sort -k2,2n -k3,3n -k4,4n
