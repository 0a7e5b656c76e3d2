#!/usr/bin/env bash
# call 213 (session 41, v71): the copies by kernels_cu/f16_copy.cuh (16-byte loads); the parts
# again (.ab/v71_parts.py), test_f16_scaled (GPU), .ab/v71_bench.py at d = 64.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 100 python3 .ab/v71_parts.py --T 2048 > $OUT/parts.txt 2>&1; echo "parts rc=$?"; cat $OUT/parts.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider -n 16 -m gpu tests/test_f16_scaled.py \
  > $OUT/tests.txt 2>&1
echo "tests rc=$?"; grep -E "passed|failed" $OUT/tests.txt | tail -2; grep -E "^FAILED|^E  " $OUT/tests.txt | head -20
timeout 200 python3 .ab/v71_bench.py --d 64 --T 2048 4096 16384 > $OUT/v71_bench.txt 2>&1
echo "bench rc=$?"; sed -n '/^# d T/,$p' $OUT/v71_bench.txt | grep -v " f16s "; grep "^#" $OUT/v71_bench.txt | head -1
