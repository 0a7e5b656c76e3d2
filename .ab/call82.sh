#!/usr/bin/env bash
# call 82: per-instruction stall samples of the packed kernel, diag loaded (base) against diag from
# the parameters (diagp, 5% faster in calls 80-81)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
for v in base diagp; do
  timeout 150 ncu --profile-from-start off --section WarpStateStats --section SourceCounters -k regex:varlen --launch-count 1 \
      --page source --print-source sass --csv python .ab/packed_probe.py $v > $OUT/source_$v.csv 2> /dev/null; echo "source $v rc=$?"
  gzip -f $OUT/source_$v.csv
done
