#!/usr/bin/env bash
# call 133 (session 24, branch bulk-dq): atomic dQ by the copy engine's reductions. The backward
# GPU tests of atomic dQ and of the tensor maps first (a hang shows as the timeout), then the
# backward of the atomic tile against the default deterministic pair, cuDNN and FA2 (fp16).
# Prediction (NOTES v31): d = 64 backward 9.4 -> ~7 ms at T = 8k (0.80 -> ~1.05x cuDNN).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 125 python3 -m pytest -q -m gpu -n 14 -p no:cacheprovider -rfE tests/test_gpu_kernels.py \
  tests/test_backward.py -k "tensor_maps or bwd or atomic" > $OUT/tests.txt 2>&1
echo "tests rc=$?"; tail -3 $OUT/tests.txt
timeout 115 python3 tools/bench_fwd_tiles.py --pass bwd --tiles default,64x128x12x2:atomic --d 64,128 \
  --dtypes float16 --T 4096,16384 --rounds 2 --reps 5 --json $OUT/bwd.json > $OUT/bwd.txt 2>&1; echo "bench rc=$?"
echo "=================== SUMMARY"; grep -E "^FAILED|passed|failed" $OUT/tests.txt | head -8; tail -9 $OUT/bwd.txt
