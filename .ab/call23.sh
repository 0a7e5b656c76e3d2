# issue 14: key-split decode tiles (flash_fwd_mma.cu v10): oracle tests, then the sweep
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 200 python -m pytest -q -m gpu -x tests/test_decode_tiles.py -p no:cacheprovider > $OUT/tests.log 2>&1
tail -2 $OUT/tests.log; grep -E "^FAILED|^ERROR|Error" $OUT/tests.log | head -10
timeout 300 python tools/bench_kvcache.py --no-host --grid 1x1,1x8,8x8,64x8 --S 8192,131072 --layouts contiguous --tiles 16x64x1x2,16x64x4x2,16x128x4x2,16x64x2x2,16x64x4x3 --max-splits 128 > $OUT/sweep.txt 2>&1
tail -9 $OUT/sweep.txt
