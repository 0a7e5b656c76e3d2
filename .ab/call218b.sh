#!/usr/bin/env bash
# call 218 (session 42): .ab/f16s_d128.patch applied (v72), then the whole GPU suite at
# main + v72 (main's dfc0a9e/f704401 were never GPU-run), .ab/v71_bench.py at d = 64 and 128,
# and compute-sanitizer memcheck on tests/sanitize.py's float32 d = 128 cases (the f16s pair
# is the default there with v72).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
git apply .ab/f16s_d128.patch 2>/dev/null || git diff --quiet || echo "working tree already carries v72"
nvidia-smi --query-gpu=name --format=csv,noheader
STEPS="env tests" LIMIT_TESTS=330 OUT=$OUT/gs bash tests/gpu_session.sh > $OUT/gs.txt 2>&1
echo "suite rc=$?"; cat $OUT/gs/summary.txt; grep -E "passed|failed" $OUT/gs/tests.log | tail -2
grep -E "^FAILED" $OUT/gs/tests.log | head -20
timeout 170 python3 .ab/v71_bench.py --d 64 128 --T 2048 4096 16384 --reps 3 > $OUT/v72_bench.txt 2>&1
echo "bench rc=$?"; sed -n '/^# d T/,$p' $OUT/v72_bench.txt | grep -v " f16s "; grep "^# 20" $OUT/v72_bench.txt
timeout 70 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tests/sanitize.py case float32 128 \
  > $OUT/san_memcheck.txt 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|^ok" $OUT/san_memcheck.txt | tail -6
