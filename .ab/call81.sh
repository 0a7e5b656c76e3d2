#!/usr/bin/env bash
# call 81: the packed probe's Mask bisected further (diagp, lenp), then where base and maskp differ:
# ncu warp states and per-instruction stall samples of the packed kernel alone
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
VARIANTS="diagp lenp maskp base" bash .ab/call80.sh
for v in base maskp; do
  timeout 150 ncu --profile-from-start off --section WarpStateStats --section SourceCounters -k regex:varlen --launch-count 1 \
      --page source --print-source sass --csv python .ab/packed_probe.py $v > $OUT/source_$v.csv 2> $OUT/source_$v.err; echo "source $v rc=$?"
  gzip -f $OUT/source_$v.csv
done
