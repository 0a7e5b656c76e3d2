#!/usr/bin/env bash
# call 83: packed self-attention kernels (plan.Variant.same_lens: the diagonal folded to 0):
# the probe on equal lengths, the whole GPU suite, the new GPU mutant, issue 12's bench
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
VARIANTS="base" bash .ab/call80.sh
STEPS="env tests" JOBS=14 LIMIT_TESTS=300 TAIL=3 timeout 310 bash tests/gpu_session.sh > $OUT/session.log 2>&1
tail -4 $OUT/session.log
grep -h "^FAILED\|^ERROR" $OUT/tests.log | head -20
timeout 150 python3 tools/mutants.py --gpu gpu_packed_self_keys_at_zero > $OUT/mutants.log 2>&1; echo "mutants rc=$?"; tail -3 $OUT/mutants.log
timeout 170 python3 tools/bench_issue12.py --parts varlen,strided --rounds 7 --min-ms 20 > $OUT/issue12.txt 2>&1; echo "issue12 rc=$?"
grep -v "^ *$" $OUT/issue12.txt | tail -22
rm -f $OUT/probe_base.err
