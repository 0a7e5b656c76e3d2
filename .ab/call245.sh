#!/usr/bin/env bash
# call 245 (session 47; call 244's aims cut to the device time left): v84 against main's kernels
# (.ab/base = a38030c; carry it). (1) the GPU tests that reach the changed forwards: every test in
# tests/test_forward.py and tests/test_variants.py, the kernels' oracle tests, (2)
# tools/ab_speed.py fwd, call 236's cells, (3) the v84 GPU mutants, (4) bench_variants'
# modifiers for base, then new. Steps guarded by the call's limit L.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-500}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
PYTHONPATH=$PWD timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -n 16 -rfE \
  tests/test_forward.py tests/test_variants.py "tests/test_gpu_kernels.py::test_tiles_against_oracle" \
  > $OUT/tests.txt 2>&1
echo "tests rc=$? at ${SECONDS}s"; tail -12 $OUT/tests.txt
left=$((L - SECONDS - 30)); [ $left -gt 190 ] && left=190
PYTHONPATH=$PWD timeout $left python3 tools/ab_speed.py --base .ab/base --new . --dtypes float16,bfloat16 \
  --d 64,128 --T 4096,16384 --passes fwd --rounds 2 > $OUT/ab.txt 2>&1; echo "ab rc=$? at ${SECONDS}s"
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
