# final kernels: full GPU suite; issue 11's window and score-modifier bench; the window's per-block cost
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
python -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)" >> $OUT/env.txt
STEPS="tests" JOBS=14 LIMIT_TESTS=300 TAIL=3 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head -20
timeout 90 python tools/bench_variants.py > $OUT/variants.txt 2>&1
timeout 60 python .ab/window_cost.py > $OUT/window_cost.txt 2>&1
cat $OUT/env.txt $OUT/variants.txt $OUT/window_cost.txt
