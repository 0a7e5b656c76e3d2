#!/usr/bin/env bash
# call 106: ncu of one decode step against the read kernel (second launch of each)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 200 ncu --kernel-name regex:'mma_fwd|read_ceiling' --launch-skip 2 --launch-count 2 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
  --section WarpStateStats --section LaunchStats \
  --metrics dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ldgsts.sum,smsp__inst_executed.sum,gpu__time_duration.sum \
  python3 .ab/decode_ncu.py > $OUT/ncu.txt 2>&1
echo "ncu rc=$?"
grep -E "^  [a-zA-Z_]|==PROF==|Duration|DRAM Through|Memory Through|dram__|lts__t_sectors|l1tex__t_requests|inst_executed|Achieved Occ|Theoretical Occ|Stall|Warp Cycles|Registers Per|Shared Memory Config|Block Limit" $OUT/ncu.txt | cut -c1-150 | head -90
