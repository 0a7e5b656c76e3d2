# final commit: full GPU suite, then compute-sanitizer memcheck and racecheck on tests/sanitize.py
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
STEPS="tests sanitize" JOBS=14 LIMIT_TESTS=280 LIMIT_SANITIZE=170 TAIL=3 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head -20
cat $OUT/summary.txt; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error|hazard" $OUT/sanitize.log | tail -8
