# GQA rows interleaved over the kv heads (v15): GQA/varlen/KV-cache GPU tests, issue 12's criteria, the window probe
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
python -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)" >> $OUT/env.txt
timeout 200 python -m pytest -q -m gpu tests/test_gqa.py tests/test_block_order.py tests/test_varlen.py tests/test_split_kv.py tests/test_kvcache.py tests/test_views.py -p no:cacheprovider -n 14 > $OUT/tests.log 2>&1
tail -3 $OUT/tests.log; grep -E "^FAILED|^ERROR" $OUT/tests.log | head
timeout 240 python tools/bench_issue12.py --rounds 9 --min-ms 20 > $OUT/bench_issue12.txt 2>&1
timeout 60 python .ab/window_probe.py > $OUT/window.txt 2>&1
timeout 90 ncu --metrics gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread python .ab/window_probe.py --once > $OUT/window_ncu.txt 2>&1
grep -E "cuflash|gpu__time|grid_size|warps_active|registers" $OUT/window_ncu.txt | head -60
cat $OUT/env.txt $OUT/bench_issue12.txt $OUT/window.txt
