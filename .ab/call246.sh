#!/usr/bin/env bash
# call 246 (session 47; the least that decides v84, for the device time left): (1) the GPU tests
# of the changed forwards: the running-max tests (climbs: the rescale; leaps: the redo), the
# 16-bit wgmma forwards' oracle tests and their score variants, (2) tools/ab_speed.py fwd at
# d = 128 (the changed kernels) and d = 64 (the control), (3) the v84 GPU mutants, (4)
# bench_variants' modifiers for base, then new. Steps guarded by the call's limit L.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-240}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
PYTHONPATH=$PWD timeout 110 python3 -m pytest -q -m gpu -p no:cacheprovider -n 16 -rfE \
  "tests/test_forward.py" -k "running_max or (wgmma and (float16 or bfloat16) and not bwd)" \
  "tests/test_gpu_kernels.py::test_tiles_against_oracle" tests/test_variants.py \
  > $OUT/tests.txt 2>&1
echo "tests rc=$? at ${SECONDS}s"; tail -12 $OUT/tests.txt
left=$((L - SECONDS - 10)); [ $left -gt 170 ] && left=170
PYTHONPATH=$PWD timeout $left python3 tools/ab_speed.py --base .ab/base --new . --dtypes float16,bfloat16 \
  --d 128,64 --T 4096,16384 --passes fwd --rounds 2 > $OUT/ab.txt 2>&1; echo "ab rc=$? at ${SECONDS}s"
grep -v "^round" $OUT/ab.txt | tail -22
[ $((L - SECONDS)) -gt 40 ] && PYTHONPATH=$PWD timeout $((L - SECONDS - 5 > 60 ? 60 : L - SECONDS - 5)) \
  python3 tools/mutants.py --gpu gpu_spec_moved_rows_not_rescaled gpu_spec_never_redoes gpu_row_max_skips_last \
  > $OUT/mutants.txt 2>&1; echo "mutants rc=$? at ${SECONDS}s"; tail -5 $OUT/mutants.txt
for a in .ab/base . ; do
  [ $((L - SECONDS)) -gt 30 ] && PYTHONPATH=$PWD/$a timeout $((L - SECONDS - 5)) python3 tools/bench_variants.py \
    --parts modifiers --rounds 2 > $OUT/variants_$(basename $(realpath $a)).txt 2>&1
done
for f in $OUT/variants_*.txt; do echo "== $f"; grep -i "forward\|ms" $f | head -12; done
echo "elapsed ${SECONDS}s"
