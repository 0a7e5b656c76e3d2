# issue 14: prepared decode calls, append kernel, validate=False, graph capture; bandwidth grid
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
python -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)" >> $OUT/env.txt
timeout 240 python -m pytest -q -m gpu -x tests/test_kvcache.py tests/test_split_kv.py tests/test_api.py -p no:cacheprovider > $OUT/tests.log 2>&1
tail -3 $OUT/tests.log; grep -E "^FAILED|^ERROR|Error" $OUT/tests.log | head -10
timeout 300 python tools/bench_kvcache.py --host-calls 10000 > $OUT/bench_kvcache.txt 2>&1
tail -60 $OUT/bench_kvcache.txt
