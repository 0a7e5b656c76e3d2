#!/usr/bin/env bash
# Call 263 (session 52), NOTES v92's next look: Nsight Compute on the B·Hkv = 1, S = 32k decode step, ours and cuDNN's.
export PYTHONPATH=$PWD
mkdir -p $OUT
timeout 120 ncu --kernel-name regex:mma_fwd --launch-skip 1 --launch-count 1 --set full --import-source no \
  --csv --page details python3 .ab/decode_ncu1.py > $OUT/ours_details.csv 2> $OUT/ours.err; echo "ours rc=$?"
timeout 60 ncu --launch-skip 4 --launch-count 4 --section SpeedOfLight --section LaunchStats --section Occupancy \
  --section WarpStateStats --csv --page details python3 .ab/decode_ncu1.py torch > $OUT/cudnn_details.csv 2> $OUT/cudnn.err; echo "cudnn rc=$?"
grep -E '"(Duration|DRAM Throughput|Memory Throughput|Grid Size|Registers Per Thread|Achieved Occupancy|Warp Cycles Per Issued Instruction|Issue Slots Busy|Executed Ipc Active)"' $OUT/ours_details.csv | cut -d, -f5,13-16 | head -12
grep -E '"(Duration|DRAM Throughput|Grid Size|Block Size|Registers Per Thread|Warp Cycles Per Issued Instruction)"' $OUT/cudnn_details.csv | cut -d, -f5,13-16 | head -24
