#!/usr/bin/env bash
# call 105 (final): the whole GPU suite at the session's last commit, then issue 14's decode grid
# (contiguous and paged 256, torch's references, host time) for the README
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=14 LIMIT_TESTS=300 TAIL=3 bash tests/gpu_session.sh > $OUT/suite.txt 2>&1; echo "suite rc=$?"
tail -4 $OUT/suite.txt; grep -h "^FAILED\|^ERROR" $OUT/tests.log | cut -c1-250 | head
timeout 200 python3 tools/bench_kvcache.py --grid 1x1,1x8,4x8,8x8,32x8,64x8 --S 1024,8192,32768,131072 \
   --layouts contiguous,paged --pages 256 > $OUT/bench_kvcache.txt 2>&1
echo "bench rc=$?"; grep -E "host |reference|differs" $OUT/bench_kvcache.txt; grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " $OUT/bench_kvcache.txt | tail -48
timeout 120 python3 tools/mutants.py --gpu decode_stages_ignored > $OUT/mutant.txt 2>&1; echo "mutant rc=$?"; tail -2 $OUT/mutant.txt
