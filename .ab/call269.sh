#!/usr/bin/env bash
# Call 269 (session 53), NOTES v97: where the B·Hkv = 1 decode step's time goes at 64 splits.
# (1) Nsight Compute on the 64-split step (the library's default since v96), ours with the warp
#     stall reasons (raw page), cuDNN's two kernels; (2) graph-timed lone blocks: the cap 1 arm
#     (one block streams every key tile; the library's tile, 2 stages, 2 warps, 128-key tiles)
#     at S = 512, 4096 and 32768 against the default, to
#     separate one block's per-tile time from the split's merge and the launch.
export PYTHONPATH=$PWD
mkdir -p $OUT
timeout 120 ncu --kernel-name regex:mma_fwd --launch-skip 1 --launch-count 1 --set full --import-source no \
  --csv --page details python3 .ab/decode_ncu1.py > $OUT/ours_details.csv 2> $OUT/ours.err; echo "ours rc=$?"
timeout 90 ncu --kernel-name regex:mma_fwd --launch-skip 1 --launch-count 1 --section WarpStateStats \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio --csv --page raw \
  python3 .ab/decode_ncu1.py > $OUT/ours_stalls.csv 2>> $OUT/ours.err; echo "stalls rc=$?"
timeout 60 ncu --launch-skip 4 --launch-count 4 --section SpeedOfLight --section LaunchStats --section Occupancy \
  --section WarpStateStats --csv --page details python3 .ab/decode_ncu1.py torch > $OUT/cudnn_details.csv 2> $OUT/cudnn.err; echo "cudnn rc=$?"
python3 .ab/ncu_digest.py $OUT/ours_details.csv $OUT/ours_stalls.csv $OUT/cudnn_details.csv | tee $OUT/digest.txt
timeout 240 python3 .ab/ring_ab.py auto@1,16x64x4x2@1,16x64x2x3@1,16x128x4x3@1 1x1x512,1x1x4096,1x1x32768 2>&1 | tee $OUT/lone.txt | tail -6
