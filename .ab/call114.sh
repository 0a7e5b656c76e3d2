#!/usr/bin/env bash
# call 114: the whole GPU suite at the session's final kernels and rule, the mutant
# decode_stages_ignored, then the README's decode table (torch, paged, host)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=14 LIMIT_TESTS=300 TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
timeout 60 python3 tools/mutants.py --gpu decode_stages_ignored > $OUT/mutant.txt 2>&1; echo "mutant rc=$?"
timeout 170 python3 tools/bench_kvcache.py --grid 1x1,1x8,4x8,8x8,32x8,64x8 > $OUT/bench_kvcache.txt 2>&1; echo "table rc=$?"
rm -f $OUT/*.tgz
echo "=================== SUMMARY"
cat $OUT/summary.txt; tail -3 $OUT/tests.log; tail -2 $OUT/mutant.txt
grep -E "contiguous|paged|host|cuDNN" $OUT/bench_kvcache.txt | tail -56
