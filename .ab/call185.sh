#!/usr/bin/env bash
# call 185 (next session; NOTES v59): with `git apply .ab/x1_fwd_default.patch` ('tf32''s forward
# default at 97 <= d <= 128 the one-float16-product kernel), the float32 tables after v57-v58:
#  - bench_f32 --x3 forward, d 64 / 128, T 2048-16384 (x1 by name, wgmma_tf32 by name, 'tf32''s
#    default, torch's efficient float32);
#  - bench_f32 --x3 backward, d 64 / 128, T 2048 / 4096 / 16384.
# Call 186: the whole GPU suite on the same tree and precision.yaml's float32 sweeps.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 260 python3 tools/bench_f32.py --x3 --d 64 128 --T 2048 4096 8192 16384 --reps 3 \
  --jobs 14 > $OUT/bench_fwd.txt 2>&1; echo "bench fwd rc=$?" >> $OUT/side.txt
timeout 250 python3 tools/bench_f32.py --pass bwd --x3 --d 64 128 --T 2048 4096 16384 --reps 3 \
  --jobs 14 > $OUT/bench_bwd.txt 2>&1; echo "bench bwd rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"; cat $OUT/side.txt
grep -hE "^(fwd|bwd) " $OUT/bench_fwd.txt $OUT/bench_bwd.txt | \
  grep -E " (tf32|highest|torch_eff|wgmma_f16x1\S*|wgmma_tf32\S*) " | sort -u
