# issue 14: where decode time goes at small B·Hkv (ncu), and a tile / split sweep
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 150 python -m pytest -q -m gpu -x tests/test_split_kv.py tests/test_kvcache.py -k "split or prepared or graph or clamp or in_kernel" -p no:cacheprovider > $OUT/tests.log 2>&1
tail -2 $OUT/tests.log; grep -E "^FAILED|^ERROR|Error" $OUT/tests.log | head -10
NCU="ncu --kernel-name regex:cuflash_mma_fwd --launch-skip 3 --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats"
timeout 80 $NCU python .ab/prof_decode2.py 1 8 131072 > $OUT/ncu_1x8_128k.txt 2>&1
timeout 80 $NCU python .ab/prof_decode2.py 1 8 131072 16x32x1x2 1024 > $OUT/ncu_1x8_128k_n32.txt 2>&1
for f in $OUT/ncu_*.txt; do echo "== $f"; grep -E "Duration|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Block Limit Shared|Block Limit Reg|Registers Per|Grid Size|Issued Warp|No Eligible|Warp Cycles Per Issued|One or More|Dynamic Shared" $f | head -20; grep -A3 "WRN\|OPT" $f | grep -i "stall" | head -4; done
timeout 200 python tools/bench_kvcache.py --no-host --grid 1x1,1x8,8x8 --S 8192,131072 --layouts contiguous --tiles 16x64x1x2,16x32x1x2 --max-splits 128,1024 --no-torch > $OUT/sweep.txt 2>&1
tail -8 $OUT/sweep.txt
timeout 60 python tools/bench_kvcache.py --grid 1x8 --S 1024 --layouts contiguous --no-torch --host-calls 10000 > $OUT/host.txt 2>&1
grep -E "us|host" $OUT/host.txt | head -8
