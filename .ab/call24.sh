# final: whole GPU suite, sanitizers on the decode path, then the decode grid against the ceiling and torch, and host time
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
python -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)" >> $OUT/env.txt
STEPS="tests" JOBS=14 LIMIT_TESTS=250 TAIL=4 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head -20
timeout 65 compute-sanitizer --tool memcheck --error-exitcode 1 python tests/sanitize.py kv > $OUT/memcheck_kv.txt 2>&1; echo "memcheck rc=$?"; tail -2 $OUT/memcheck_kv.txt
timeout 65 compute-sanitizer --tool racecheck --error-exitcode 1 python tests/sanitize.py kv > $OUT/racecheck_kv.txt 2>&1; echo "racecheck rc=$?"; tail -2 $OUT/racecheck_kv.txt
timeout 170 python tools/bench_kvcache.py --S 1024,8192,131072 --pages 256,16 --host-calls 10000 > $OUT/bench_kvcache.txt 2>&1
grep -A5 "host time per" $OUT/bench_kvcache.txt | head -6; grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $OUT/bench_kvcache.txt | tail -36
