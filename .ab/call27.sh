# split caps and the key-split tile with the in-kernel merge (small steps)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 200 python tools/bench_kvcache.py --no-host --no-torch --grid 1x1,1x8,8x8,64x8 --S 1024,8192,131072 --layouts contiguous --tiles 16x64x1x2,16x64x4x2 --max-splits 16,32,128 > $OUT/sweep.txt 2>&1
tail -13 $OUT/sweep.txt
