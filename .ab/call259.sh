#!/usr/bin/env bash
# v91 final form (one cluster of all the splits, default on): the whole GPU suite, the sanitizer
# over the decode path, then the A/B of the one-cluster cells. OUT=... bash .ab/call259.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT
STEPS="env tests" LIMIT_TESTS=320 OUT=$OUT/gs TAIL=4 bash tests/gpu_session.sh > $OUT/gs.txt 2>&1
grep -E "passed|failed" $OUT/gs/tests.log | tail -1
SANITIZE_ARGS=kv STEPS=sanitize LIMIT_SANITIZE_WARM=90 LIMIT_SANITIZE=45 OUT=$OUT/san TAIL=3 bash tests/gpu_session.sh > $OUT/san.txt 2>&1
grep "rc=" $OUT/san.txt; grep -h -E "ERROR SUMMARY|RACECHECK SUMMARY|^ok" $OUT/san/sanitize.log | head -20
timeout 75 python3 .ab/cluster_ab.py 1x1x1024,1x8x1024,8x8x1024,4x8x1024 > $OUT/ab.txt 2>&1; echo "ab rc=$?"
grep -E "FAILED|ERROR " $OUT/gs/tests.log | head -20
echo "=== A/B"; grep -E "^check|^[0-9]+x" $OUT/ab.txt | tail -12
timeout 70 python3 tools/mutants.py --gpu gpu_cluster_merge_own_lse gpu_cluster_merge_no_wait > $OUT/mutants.txt 2>&1; tail -3 $OUT/mutants.txt
