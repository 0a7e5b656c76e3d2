#!/usr/bin/env bash
# call 225 (session 44; v79 in the tree: float64's forward skips O's rescaling while no row's max
# moves by more than 2^8): (1) the float64 / dmma GPU tests and test_running_max_climbs (every
# dtype); (2) tools/ab_speed.py, float64 forward, this tree against .ab/base (0e70a60, carried);
# (3) .ab/f64_tiles.py at the default tiles with torch's math path (issue 15's ratio);
# (3b) .ab/f64_bwd_tiles.py: dK/dV on m16n8k16 (16 keys a warp, 16-query steps; NVRTC 48 B of
# spill, none in the loop under nvcc) against the default; (4) the GPU mutant gpu_lazy_rescale_only_first_tile; (5) sanitizer on the float64 case.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 python3 -m pytest -q -p no:cacheprovider -n 16 -m gpu -k "float64 or dmma or climbs" tests > $OUT/f64_tests.txt 2>&1
echo "f64 tests rc=$?"; grep -E "passed|failed" $OUT/f64_tests.txt | tail -1; grep -E "^FAILED" $OUT/f64_tests.txt | head -10
timeout 150 python3 tools/ab_speed.py --base .ab/base --new . --dtypes float64 --d 64,128 --T 4096,16384 \
  --passes fwd --rounds 2 > $OUT/ab_fwd.txt 2>&1; echo "ab fwd rc=$?"
timeout 70 python3 .ab/f64_tiles.py --d 128 64 --T 4096 16384 --reps 5 --tiles default > $OUT/f64_fwd.txt 2>&1
echo "f64 fwd rc=$?"
timeout 60 python3 .ab/f64_bwd_tiles.py --d 64 --T 4096 16384 --reps 5 \
  --tiles 64x64x8x2,16x64x4x2,16x64x4x1 > $OUT/f64_bwd.txt 2>&1; echo "f64 bwd rc=$?"
if [[ $SECONDS -lt 480 ]]; then
  timeout $((560 - SECONDS)) python3 tools/mutants.py --gpu gpu_lazy_rescale_only_first_tile > $OUT/mutants.txt 2>&1
  echo "mutants rc=$?"; tail -3 $OUT/mutants.txt
fi
if [[ $SECONDS -lt 470 ]]; then
  timeout 40 python3 tests/sanitize.py case float64 128 > $OUT/sanitize.txt 2>&1; echo "warm rc=$?"
  timeout 50 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tests/sanitize.py case float64 128 >> $OUT/sanitize.txt 2>&1; echo "memcheck rc=$?"
  timeout $((585 - SECONDS)) compute-sanitizer --tool racecheck --error-exitcode 1 python3 tests/sanitize.py case float64 128 >> $OUT/sanitize.txt 2>&1; echo "racecheck rc=$?"
  tail -3 $OUT/sanitize.txt
fi
grep -v "^round" $OUT/ab_fwd.txt | tail -12; grep -v "^# 20" $OUT/f64_fwd.txt | tail -14; grep -v "^# 20" $OUT/f64_bwd.txt | tail -14
echo "elapsed ${SECONDS}s"
