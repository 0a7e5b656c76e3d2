#!/usr/bin/env bash
# call 216 (session 41, v71): the maxima by f16_copy.cuh's absmax4 too; test_f16_scaled (GPU),
# the parts, .ab/v71_bench.py at d = 64.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 16 -m gpu tests/test_f16_scaled.py \
  > $OUT/tests.txt 2>&1
echo "tests rc=$?"; grep -E "passed|failed" $OUT/tests.txt | tail -2; grep -E "^FAILED|^E  " $OUT/tests.txt | head -20
timeout 60 python3 .ab/v71_parts.py --T 2048 > $OUT/parts.txt 2>&1; echo "parts rc=$?"; grep -E "whole|cast|pair" $OUT/parts.txt
timeout 120 python3 .ab/v71_bench.py --d 64 --T 2048 4096 16384 > $OUT/v71_bench.txt 2>&1
echo "bench rc=$?"; sed -n '/^# d T/,$p' $OUT/v71_bench.txt | grep -v " f16s "; grep "^# 20" $OUT/v71_bench.txt
