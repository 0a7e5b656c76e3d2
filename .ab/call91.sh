#!/usr/bin/env bash
# call 91: the long-sequence float32 test (T = S = 16384, NOTES v25) and its mutant
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 240 python3 -m pytest -q -m gpu tests/test_long_keys.py -k long_sequence -n 8 -rfEs -p no:cacheprovider --durations=3 > $OUT/long_seq.log 2>&1; echo "long seq rc=$?"
tail -8 $OUT/long_seq.log; grep -h "^FAILED\|^ERROR\|Error:" $OUT/long_seq.log | cut -c1-300 | head
timeout 300 python3 tools/mutants.py --gpu gpu_simt_running_sum > $OUT/mutant.txt 2>&1; echo "mutant rc=$?"; tail -4 $OUT/mutant.txt
