#!/usr/bin/env bash
# call 244 (session 47; call 243's aims in the one call a scarce device may give): v84, the
# speculative softmax of the 16-bit wgmma forwards, against main's kernels (.ab/base = a38030c;
# carry it). (1) the whole GPU suite on this tree (the running-max tests, every forward's oracle
# tests, the variants), (2) tools/ab_speed.py fwd, call 236's cells, (3) the v84 GPU mutants,
# (4) bench_variants' modifiers for base, then new. Steps guarded by the call's limit L.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-592}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
STEPS="env tests" LIMIT_TESTS=300 OUT=$OUT/gs TAIL=6 bash tests/gpu_session.sh 2>&1 | tail -8
(cd $OUT && tar czf gs.tgz gs && rm -rf gs); echo "suite done at ${SECONDS}s"
left=$((L - SECONDS - 40)); [ $left -gt 190 ] && left=190
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
