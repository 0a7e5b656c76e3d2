#!/usr/bin/env bash
# call 214 (session 41): the whole GPU suite at the final commit, then compute-sanitizer memcheck
# and racecheck on tests/sanitize.py's float32 d = 64 cases (the 'wgmma_f16s' pair).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
git log --oneline -1 2>/dev/null
STEPS="env tests" LIMIT_TESTS=380 OUT=$OUT/gs bash tests/gpu_session.sh > $OUT/gs.txt 2>&1
echo "suite rc=$?"; cat $OUT/gs/summary.txt; grep -E "passed|failed" $OUT/gs/tests.log | tail -2
grep -E "^FAILED" $OUT/gs/tests.log | head -20
for tool in memcheck racecheck; do
  timeout 75 compute-sanitizer --tool $tool --error-exitcode 1 python3 tests/sanitize.py case float32 64 \
    > $OUT/san_$tool.txt 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^ok" $OUT/san_$tool.txt | tail -6
done
