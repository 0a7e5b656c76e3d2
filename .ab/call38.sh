# the forward block's fixed cost (dense non-causal, 1..32 key tiles per block) and GQA's dK/dV kernel, by ncu
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
timeout 100 python .ab/fixed_cost.py > $OUT/fixed_cost.txt 2>&1
cat $OUT/fixed_cost.txt
SEC="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters"
# launches of --once: warm-up and timed call per S; S=128 is launches 0,1; S=1024 launches 6,7
timeout 150 ncu $SEC --kernel-name regex:wgmma_fwd --launch-skip 1 --launch-count 1 python .ab/fixed_cost.py --once > $OUT/ncu_fwd_S128.txt 2>&1
timeout 150 ncu $SEC --kernel-name regex:wgmma_fwd --launch-skip 7 --launch-count 1 python .ab/fixed_cost.py --once > $OUT/ncu_fwd_S1024.txt 2>&1
timeout 150 ncu --profile-from-start off $SEC --kernel-name regex:dkdv python .ab/dkdv_probe.py > $OUT/ncu_dkdv.txt 2>&1
for f in ncu_fwd_S128 ncu_fwd_S1024 ncu_dkdv; do echo "== $f"; grep -E "Duration|Elapsed Cycles|SM Active Cycles|Registers|Achieved Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Stall|No Eligible|Memory Throughput|DRAM Through|L2 Hit|Waves Per SM|est. speedup|Warning|cuflash_" $OUT/$f.txt | head -45; done
