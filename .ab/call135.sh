#!/usr/bin/env bash
# call 135 (next session, branch bulk-dq, rebased on main): atomic dQ's three forms, A/B'd with
# alternating rounds on one tile (tools/ab_speed.py --bwd-tile 64x128x12x2:atomic). Prepare here
# first (ignored paths; carry .ab/arms):
#   for a in red:main bulk:bulk-dq~1; do n=${a%%:*}; rm -rf .ab/arms/$n; mkdir -p .ab/arms/$n
#     git archive ${a#*:} cuflash kernels_cu setup.cfg | tar -x -C .ab/arms/$n; done
# red = main (red.global from the registers, dQ in turns), bulk = bulk-dq~1 (the copy engine's
# reductions, dQ in turns), this tree = bulk-dq (d = 128: dQ's product split over both consumer
# warpgroups, kSplitDq). The atomic GPU tests on this tree first (the split has never run).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 120 python3 -m pytest -q -m gpu -n 14 -p no:cacheprovider -rfE tests/test_gpu_kernels.py \
  tests/test_backward.py -k "tensor_maps or atomic" > $OUT/tests.txt 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests.txt
A="--passes bwd --bwd-tile 64x128x12x2:atomic --T 4096,16384 --dtypes float16 --rounds 2"
timeout 150 python3 tools/ab_speed.py --base .ab/arms/red --new .ab/arms/bulk $A > $OUT/red_bulk.txt 2>&1
echo "red->bulk rc=$?"
timeout 150 python3 tools/ab_speed.py --base .ab/arms/bulk --new . $A > $OUT/bulk_split.txt 2>&1
echo "bulk->split rc=$?"
timeout 120 python3 tools/bench_fwd_tiles.py --pass bwd --tiles default,64x128x12x2:atomic --d 64,128 \
  --dtypes float16 --T 4096,16384 --rounds 2 --reps 5 > $OUT/bwd_vs_torch.txt 2>&1; echo "bench rc=$?"
echo "=================== SUMMARY"; tail -10 $OUT/red_bulk.txt; tail -10 $OUT/bulk_split.txt
tail -9 $OUT/bwd_vs_torch.txt
