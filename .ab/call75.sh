#!/usr/bin/env bash
# call 75 (issue 15): 3xTF32 summation schemes, errors and speed (.ab/tf32_schemes.py)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
for s in "0 0" "0 2" "1 2" "1 1" "0 1" "1 0"; do
  set -- $s
  QK=$1 PV=$2 timeout 100 python3 .ab/tf32_schemes.py >> $OUT/schemes.txt 2>&1
done
cat $OUT/schemes.txt | grep -v Warning
