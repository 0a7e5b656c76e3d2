#!/usr/bin/env bash
# call 78: the TF32 tests at the final tiles (d = 96, 160, 200 too), a decode step's host profile
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 150 python3 -m pytest -q -m gpu tests/test_tf32.py -n 12 -rfE -p no:cacheprovider > $OUT/test_tf32.log 2>&1; echo "tf32 tests rc=$?"; tail -2 $OUT/test_tf32.log
timeout 100 python3 .ab/decode_host.py > $OUT/decode_host.txt 2>&1; echo "decode host rc=$?"; head -60 $OUT/decode_host.txt
timeout 150 python3 tools/bench_f32.py --d 96 160 200 --T 4096 --causal no --reps 5 --no-torch --jobs 12 > $OUT/bench_f32_mid.txt 2>&1; echo "bench rc=$?"; sed -n '/^# pass d T/,$p' $OUT/bench_f32_mid.txt
