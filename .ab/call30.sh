# v13: block order (GridTile) and the split merge's unroll: full GPU suite, order A/B, decode at small S, gqa.yaml
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
python -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)" >> $OUT/env.txt
STEPS="tests" JOBS=14 LIMIT_TESTS=230 TAIL=4 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head -20
timeout 150 python tools/bench_order.py > $OUT/bench_order.txt 2>&1
timeout 80 python tools/bench_kvcache.py --no-host --grid 1x1,1x8,8x8 --S 1024,8192,131072 --layouts contiguous > $OUT/bench_kv.txt 2>&1
STEPS="gqa" LIMIT_GQA=130 SET_GQA="--set measure.repeats=6" bash tests/gpu_session.sh > $OUT/session_gqa.txt 2>&1
tail -4 $OUT/session_gqa.txt
grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $OUT/bench_kv.txt | tail -9
cat $OUT/bench_order.txt | tail -100
