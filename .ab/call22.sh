# issue 14: long caches against the oracle; decode tiles with deeper cp.async rings (stages 3-4)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 120 python -m pytest -q -m gpu -x tests/test_kvcache.py -k "long or in_kernel_path and f16" -p no:cacheprovider > $OUT/tests.log 2>&1
tail -2 $OUT/tests.log; grep -E "^FAILED|^ERROR|Error|max err|worse" $OUT/tests.log | head -10
timeout 330 python tools/bench_kvcache.py --no-host --grid 1x1,1x8,8x8,64x8 --S 8192,131072 --layouts contiguous --tiles 16x64x1x2,16x32x1x3,16x32x1x4,16x16x1x4,16x64x1x3 --max-splits 128,512 > $OUT/sweep.txt 2>&1
tail -9 $OUT/sweep.txt
