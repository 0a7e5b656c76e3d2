#!/usr/bin/env bash
# call 232 (prepared in session 45, reordered in 46): v81, the wgmma forwards' lazy rescale
# (.ab/lazy16.patch, applied to the working tree), and v82 + v83 on top of it (.ab/arms/tree:
# the warp vote before the shuffles, .ab/vote.patch; the row max in 8 running maxima,
# .ab/tree.patch). .ab/base = main's kernels (git archive HEAD).
# carry=[".ab/base", ".ab/arms/tree"]. Most important first: the tree arm's tests, its A/B
# against base, the modifiers, its mutants; v81 alone against base last.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
mkdir -p .ab/v81 && cp -r cuflash kernels_cu tools .ab/v81/
for a in .ab/base .ab/v81 ; do PYTHONPATH=$a timeout 200 python3 .ab/warm_fwd.py >> $OUT/warm.txt 2>&1 & done
# the arm's tests run from its folder: `python -m` puts the working directory first on sys.path
(cd .ab/arms/tree && python3 -c "import cuflash; print(cuflash.__file__)" && timeout 200 python3 -m pytest -q \
  -p no:cacheprovider -n 12 -m gpu ../../../tests/test_forward.py ../../../tests/test_variants.py \
  ../../../tests/test_wgmma_tf32.py -k "climbs or leaps or wgmma") > $OUT/tests_tree.txt 2>&1
echo "tests tree rc=$? at ${SECONDS}s"; tail -1 $OUT/tests_tree.txt; grep "^FAILED" $OUT/tests_tree.txt | head -8
wait; echo "warm at ${SECONDS}s"; cat $OUT/warm.txt
AB="--dtypes float16,bfloat16 --d 64,128 --T 4096,16384 --passes fwd --rounds 2"
timeout 150 python3 tools/ab_speed.py --base .ab/base --new .ab/arms/tree $AB > $OUT/ab_tree.txt 2>&1; echo "ab tree rc=$? at ${SECONDS}s"
for a in .ab/base .ab/arms/tree; do
  PYTHONPATH=$PWD/$a timeout 45 python3 tools/bench_variants.py --parts modifiers --rounds 3 > $OUT/variants_$(basename $a).txt 2>&1
done
echo "variants at ${SECONDS}s"
# v82 + v83 into the working tree (this machine's copy), then their GPU mutants
git apply .ab/vote.patch .ab/tree.patch .ab/mutants83.patch && echo "applied v82 v83" && \
  timeout 150 python3 tools/mutants.py --gpu gpu_lazy_rescale_only_first_tile gpu_row_max_skips_last > $OUT/mutant.txt 2>&1
echo "mutants rc=$?"; tail -4 $OUT/mutant.txt
[ $SECONDS -lt 450 ] && timeout $((560 - SECONDS)) python3 tools/ab_speed.py --base .ab/base --new .ab/v81 $AB > $OUT/ab_v81.txt 2>&1
echo "ab v81 rc=$? at ${SECONDS}s"
for f in ab_tree ab_v81; do echo "== $f"; grep -v "^round" $OUT/$f.txt | tail -22; done
for a in base tree; do echo "== variants $a"; grep forward $OUT/variants_$a.txt; done
echo "elapsed ${SECONDS}s"
