#!/usr/bin/env bash
# call 156 (branch tf32-ws, NOTES v42): the warp-specialized TF32 forward (flash_fwd_wgmma_ws.cu
# with float32): its GPU tests, its new GPU mutant, compute-sanitizer on it, and its speed beside
# the 8-warp TF32 kernel (bench_f32 --wgmma, same process). Every other kernel's SASS is main's.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider -n 14 tests/test_wgmma_tf32.py \
  tests/test_gpu_kernels.py -k "wgmma_tf32 or ws_forward" > $OUT/tests.txt 2>&1
echo "tests rc=$?"; tail -3 $OUT/tests.txt
timeout 150 python3 tools/mutants.py --gpu gpu_wgmma_tf32_ws_q_rows > $OUT/mutant.txt 2>&1
echo "mutant rc=$?"; tail -3 $OUT/mutant.txt
timeout 240 python3 tools/bench_f32.py --wgmma --d 64 128 --T 1024 4096 16384 --reps 3 --jobs 14 \
  --no-torch > $OUT/bench.txt 2>&1; echo "bench rc=$?"
(timeout 100 compute-sanitizer --tool racecheck --error-exitcode 1 python3 tests/sanitize.py case float32 128 \
  > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$?"; tail -4 $OUT/racecheck.txt)
grep -E "^fwd " $OUT/bench.txt | grep -E "wgmma_tf32|mma_tf32|w12" | sort -k2,2n -k3,3n -k4,4n
