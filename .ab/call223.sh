#!/usr/bin/env bash
# call 223 (session 43; v78 in the tree: the m16n8k16 dmma fragments read straight from shared
# memory, no register copies): (1) the float64 / dmma GPU tests; (2) tools/ab_speed.py, float64,
# this tree against .ab/base (HEAD before v78; carried); (3) compute-sanitizer memcheck and
# racecheck on tests/sanitize.py's float64 d = 128 case (v76's tile, v78's fragments).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 16 -m gpu -k "float64 or dmma" tests > $OUT/f64_tests.txt 2>&1
echo "f64 tests rc=$?"; grep -E "passed|failed" $OUT/f64_tests.txt | tail -1; grep -E "^FAILED" $OUT/f64_tests.txt | head -10
timeout 150 python3 tools/ab_speed.py --base .ab/base --new . --dtypes float64 --d 64,128 --T 4096,16384 \
  --passes fwd --rounds 2 > $OUT/ab_fwd.txt 2>&1; echo "ab fwd rc=$?"
timeout 90 python3 tools/ab_speed.py --base .ab/base --new . --dtypes float64 --d 64,128 --T 4096 \
  --passes bwd --rounds 2 > $OUT/ab_bwd.txt 2>&1; echo "ab bwd rc=$?"
if [[ $SECONDS -lt 380 ]]; then
  timeout 60 python3 tests/sanitize.py case float64 128 > $OUT/sanitize.txt 2>&1; echo "warm rc=$?"
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tests/sanitize.py case float64 128 >> $OUT/sanitize.txt 2>&1; echo "memcheck rc=$?"
  timeout $((560 - SECONDS)) compute-sanitizer --tool racecheck --error-exitcode 1 python3 tests/sanitize.py case float64 128 >> $OUT/sanitize.txt 2>&1; echo "racecheck rc=$?"
  tail -4 $OUT/sanitize.txt
fi
grep -v "^round" $OUT/ab_fwd.txt | tail -12; grep -v "^round" $OUT/ab_bwd.txt | tail -8
echo "elapsed ${SECONDS}s"
