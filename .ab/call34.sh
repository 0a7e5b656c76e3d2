# final commit of the seventh session: full GPU suite; issue 12's criteria side by side (more rounds, timings of >= 20 ms)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
python -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)" >> $OUT/env.txt
git log --oneline -1 >> $OUT/env.txt 2>/dev/null || true
STEPS="tests" JOBS=14 LIMIT_TESTS=240 TAIL=3 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head -20
timeout 220 python tools/bench_issue12.py --rounds 9 --min-ms 20 > $OUT/bench_issue12.txt 2>&1
cat $OUT/env.txt $OUT/bench_issue12.txt
