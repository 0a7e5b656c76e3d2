#!/usr/bin/env bash
# call 119 (issue 14, final kernels of session 22): the whole GPU suite, the two new GPU mutants
# of split-KV's merge, the README's decode table (torch in the same run)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=14 LIMIT_TESTS=300 TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
echo "== README table"
timeout 170 python3 tools/bench_kvcache.py --grid 1x1,1x8,4x8,8x8,32x8,64x8 > $OUT/bench_kvcache.txt 2>&1; echo "table rc=$?"
echo "== mutants"
timeout 110 python3 tools/mutants.py --gpu gpu_split_merge_weights_unnormalized gpu_split_merge_first_batch_only > $OUT/mutants.txt 2>&1; echo "mutants rc=$?"
echo "=================== SUMMARY"
cat $OUT/summary.txt; tail -3 $OUT/tests.log 2>/dev/null | cut -c1-300
tail -4 $OUT/mutants.txt
grep -E "contiguous|paged" $OUT/bench_kvcache.txt | head -48 | awk '{print $1,$2,$3,$5,$6,$7,$8,$9,$10,$11}'
grep -E "host|wall" $OUT/bench_kvcache.txt | head -6
