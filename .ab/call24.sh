# final: whole GPU suite, then the decode grid against the ceiling and torch, host time, sanitizers on the decode path
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
python -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)" >> $OUT/env.txt
STEPS="tests" JOBS=12 LIMIT_TESTS=260 TAIL=4 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head -20
timeout 70 compute-sanitizer --tool memcheck --error-exitcode 1 python tests/sanitize.py kv > $OUT/memcheck_kv.txt 2>&1; echo "memcheck rc=$?"; tail -2 $OUT/memcheck_kv.txt
timeout 70 compute-sanitizer --tool racecheck --error-exitcode 1 python tests/sanitize.py kv > $OUT/racecheck_kv.txt 2>&1; echo "racecheck rc=$?"; tail -2 $OUT/racecheck_kv.txt
timeout 200 python tools/bench_kvcache.py --pages 256,16 --host-calls 10000 > $OUT/bench_kvcache.txt 2>&1
grep -A8 "host time per" $OUT/bench_kvcache.txt | head -7; tail -50 $OUT/bench_kvcache.txt | grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+" | tail -48
