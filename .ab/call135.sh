#!/usr/bin/env bash
# call 135 (next session, branch bulk-dq): atomic dQ's three forms side by side, each tree in its
# own process against cuDNN and FA2 in the same call (ratios to cuDNN comparable across arms).
# Prepare here first (the arms are ignored paths; carry .ab/arms):
#   for a in red:main bulk:bulk-dq~1 split:bulk-dq; do n=${a%%:*}; rm -rf .ab/arms/$n; mkdir -p .ab/arms/$n
#     git archive ${a#*:} cuflash kernels_cu tools setup.cfg | tar -x -C .ab/arms/$n; done
# (bulk-dq~1: the copy engine's reductions, dQ in turns; bulk-dq: d = 128 split over both
# consumer warpgroups, kSplitDq; main: red.global in turns.) Then the atomic GPU tests on the
# branch's tree (the split has never run).
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
PYTHONPATH=$PWD timeout 120 python3 -m pytest -q -m gpu -n 14 -p no:cacheprovider -rfE tests/test_gpu_kernels.py \
  tests/test_backward.py -k "tensor_maps or atomic" > $OUT/tests.txt 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests.txt
for n in red bulk split; do
  (cd .ab/arms/$n && PYTHONPATH=$PWD timeout 110 python3 tools/bench_fwd_tiles.py --pass bwd \
     --tiles default,64x128x12x2:atomic --d 64,128 --dtypes float16 --T 4096,16384 --rounds 2 --reps 5 \
     > $OUT/bwd_$n.txt 2>&1); echo "$n rc=$?"
done
echo "=================== SUMMARY"; for n in red bulk split; do echo "== $n"; tail -8 $OUT/bwd_$n.txt; done
