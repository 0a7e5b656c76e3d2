#!/usr/bin/env bash
# call 163 (NOTES v47, .ab/tf32_wide.patch; never run on a GPU before): precision 'tf32' at wide
# heads on Hopper's warpgroup tensor cores: the 4-warp TF32 wgmma forward with 32-key tiles at
# 128 < d <= 256 (head dim padded to 192 / 256), opt-in (tile.wgmma_tf32_wide_tiles), and the
# staging kernel at those widths. Before the call, in the checkout the device copies: the x3
# patches of either stack (.ab/f16x3.patch + .ab/f16x3_bwd.patch, or the _after_unstaged pair
# after .ab/tf32_unstaged.patch), then git apply .ab/tf32_wide.patch (checked to apply on both
# stacks; not on main alone: it meets them in plan.py and tools/bench_f32.py).
# Prediction (NOTES v47): within the 'tf32' criterion; at d = 256, T = 4096-16384: 100-150
# TFLOP/s, 1.2-1.7x the mma.sync 'tf32' (71-95) and 2.6-4.0x torch's efficient float32 forward
# (the bar is 5x); at d = 192 the same order.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 14 tests/test_wgmma_tf32_wide.py \
  tests/test_wgmma_tf32.py > $OUT/tests.txt 2>&1
echo "tests rc=$?"; tail -3 $OUT/tests.txt; grep -E "^(FAILED|ERROR)" $OUT/tests.txt | head -5
timeout 300 python3 tools/bench_f32.py --wgmma --d 192 256 --T 1024 4096 16384 --reps 3 \
  --jobs 14 > $OUT/bench.txt 2>&1; echo "bench rc=$?"
timeout 90 python3 tools/mutants.py --gpu gpu_tf32_stage_narrow_for_wide > $OUT/mutant.txt 2>&1
echo "mutants rc=$?"; tail -3 $OUT/mutant.txt
echo "=================== SUMMARY"; grep -E "^fwd " $OUT/bench.txt | grep -E "tf32|torch_eff" | sort -k2,2n -k3,3n -k4,4n
