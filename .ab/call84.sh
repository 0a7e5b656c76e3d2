#!/usr/bin/env bash
# call 84: issue 12's speed bars in one run at the final kernels (packed self-attention kernels)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
T0=$SECONDS
timeout 330 python3 tools/bench_issue12.py --parts varlen,strided,gqa --rounds 5 --min-ms 20 > $OUT/issue12.txt 2>&1; echo "issue12 rc=$? at $((SECONDS - T0)) s"
grep -v "^ *$" $OUT/issue12.txt | tail -44
