#!/usr/bin/env bash
# call 235 (session 46; call 232's plan in one call, device time being short): the working tree
# is v81 (.ab/lazy16.patch applied); here v82 + v83 and their mutants go on top (.ab/vote.patch,
# .ab/tree.patch, .ab/mutants83.patch), then (1) tools/ab_speed.py fwd against .ab/base (main's
# kernels), (2) the whole GPU suite on this tree, (3) the GPU mutants of v81-v83, (4)
# bench_variants' modifiers for base and this tree. carry=[".ab/base"].
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-595}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
git apply .ab/vote.patch .ab/tree.patch .ab/mutants83.patch && echo "applied v82 v83"
git diff --stat | tail -1
for a in .ab/base . ; do PYTHONPATH=$PWD/$a timeout 150 python3 .ab/warm_fwd.py >> $OUT/warm.txt 2>&1 & done; wait
echo "warm at ${SECONDS}s"; cat $OUT/warm.txt
timeout 170 python3 tools/ab_speed.py --base .ab/base --new . --dtypes float16,bfloat16 --d 64,128 \
  --T 4096,16384 --passes fwd --rounds 2 > $OUT/ab.txt 2>&1; echo "ab rc=$? at ${SECONDS}s"
grep -v "^round" $OUT/ab.txt | tail -22
STEPS="env tests" LIMIT_TESTS=$((L - 110 - SECONDS)) OUT=$OUT/gs TAIL=4 bash tests/gpu_session.sh 2>&1 | tail -6
(cd $OUT && tar czf gs.tgz gs && rm -rf gs); echo "suite done at ${SECONDS}s"
timeout 60 python3 tools/mutants.py --gpu gpu_lazy_rescale_only_first_tile gpu_row_max_skips_last > $OUT/mutant.txt 2>&1
echo "mutants rc=$? at ${SECONDS}s"; tail -4 $OUT/mutant.txt
for a in .ab/base . ; do
  [ $((L - SECONDS)) -gt 25 ] && PYTHONPATH=$PWD/$a timeout $((L - SECONDS - 3)) python3 tools/bench_variants.py \
    --parts modifiers --rounds 2 > $OUT/variants_$(basename $(realpath $a)).txt 2>&1
done
for f in $OUT/variants_*.txt; do echo "== $f"; grep forward $f; done
echo "elapsed ${SECONDS}s"
