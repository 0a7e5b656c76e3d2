#!/usr/bin/env bash
# call 227 (session 44; the least of call 226 that v79 needs, for a call of ~300 s: no machine
# came for eight tries): (1) the float64 / dmma GPU tests and test_running_max_climbs; (2)
# ab_speed, float64 forward, one round, against .ab/base (0e70a60, carried); (3) .ab/f64_tiles.py
# at the default tiles with torch's math path; (4) GPU mutant gpu_lazy_rescale_only_first_tile.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-600}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
timeout 170 python3 -m pytest -q -p no:cacheprovider -n 16 -m gpu -k "float64 or dmma or climbs" tests > $OUT/f64_tests.txt 2>&1
echo "f64 tests rc=$?"; grep -E "passed|failed" $OUT/f64_tests.txt | tail -1; grep -E "^FAILED" $OUT/f64_tests.txt | head -10
timeout $((L - 110 - SECONDS)) python3 tools/ab_speed.py --base .ab/base --new . --dtypes float64 --d 64,128 \
  --T 4096,16384 --passes fwd --rounds 1 > $OUT/ab_fwd.txt 2>&1; echo "ab fwd rc=$?"
timeout $((L - 60 - SECONDS)) python3 .ab/f64_tiles.py --d 128 64 --T 4096 16384 --reps 5 --tiles default > $OUT/f64_fwd.txt 2>&1
echo "f64 fwd rc=$?"
timeout $((L - 10 - SECONDS)) python3 tools/mutants.py --gpu gpu_lazy_rescale_only_first_tile > $OUT/mutants.txt 2>&1
echo "mutants rc=$?"; tail -2 $OUT/mutants.txt
grep -v "^round" $OUT/ab_fwd.txt | tail -10; grep -v "^# 20" $OUT/f64_fwd.txt | tail -12
echo "elapsed ${SECONDS}s"
