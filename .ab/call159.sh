#!/usr/bin/env bash
# call 159 (NOTES v43, .ab/tf32_unstaged.patch applied on main; never run on a GPU before): the
# warp-specialized TF32 forward whose producer makes K and Vᵀ itself (no staging pass on the host).
# Before the call, in the checkout the device copies:
#   git apply .ab/tf32_unstaged.patch
#   rm -rf .ab/base && mkdir -p .ab/base && git archive HEAD cuflash kernels_cu setup.cfg tools | tar -x -C .ab/base
# and run with carry [".ab/base"] (main's tree, the A/B's base).
# Prediction (NOTES v43): T = 1024 +15-30%, T = 16384 between -5% and +3% (float32 'tf32' forward).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider -n 14 tests/test_wgmma_tf32.py \
  tests/test_gpu_kernels.py -k "wgmma_tf32 or ws_forward" > $OUT/tests.txt 2>&1
echo "tests rc=$?"; tail -3 $OUT/tests.txt
timeout 120 python3 tools/mutants.py --gpu gpu_wgmma_tf32_own_vt_unpermuted \
  gpu_wgmma_tf32_own_k_truncated gpu_wgmma_tf32_ws_staged_anyway > $OUT/mutant.txt 2>&1
echo "mutants rc=$?"; tail -4 $OUT/mutant.txt
for d in 128 64; do
  (timeout 60 compute-sanitizer --tool racecheck --error-exitcode 1 python3 tests/sanitize.py case float32 $d \
    > $OUT/racecheck$d.txt 2>&1; echo "racecheck d=$d rc=$?"; tail -2 $OUT/racecheck$d.txt)
done
(timeout 60 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tests/sanitize.py case float32 128 \
  > $OUT/memcheck.txt 2>&1; echo "memcheck rc=$?"; tail -2 $OUT/memcheck.txt)
timeout 200 python3 tools/ab_speed.py --base .ab/base --new . --dtypes float32:tf32 --d 64,128 \
  --T 1024,4096,16384 --passes fwd --causal 0,1 --rounds 2 --json $OUT/ab.json > $OUT/ab.txt 2>&1
echo "ab rc=$?"
echo "=================== SUMMARY"; tail -16 $OUT/ab.txt
