# final kernels of the session: full GPU suite, compute-sanitizer memcheck/racecheck, issue 12's speed criteria side by side
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
python -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)" >> $OUT/env.txt
STEPS="tests sanitize" JOBS=14 LIMIT_TESTS=230 LIMIT_SANITIZE=75 TAIL=3 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head -20
cat $OUT/summary.txt; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^ok" $OUT/sanitize.log | sort | uniq -c | sort -rn | head -6
timeout 200 python tools/bench_issue12.py > $OUT/bench_issue12.txt 2>&1
cat $OUT/bench_issue12.txt
