#!/usr/bin/env bash
# call 76 (issue 15): 3xTF32 with fresh per-k-step (QK) and per-tile (PV) sums: tests, sanitizer,
# tile ablation of tf32x3, errors, speed against torch's efficient float32
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 200 python3 -m pytest -q -m gpu tests/test_tf32.py -n 12 -rfE -p no:cacheprovider > $OUT/test_tf32.log 2>&1; echo "tf32 tests rc=$?"; tail -3 $OUT/test_tf32.log
for c in "float32 96" "float32 64"; do
  timeout 120 python3 tests/sanitize.py case $c > /dev/null 2>&1
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tests/sanitize.py case $c > $OUT/memcheck_${c// /_}.log 2>&1; echo "memcheck $c rc=$?"; tail -2 $OUT/memcheck_${c// /_}.log
  timeout 200 compute-sanitizer --tool racecheck --error-exitcode 1 python3 tests/sanitize.py case $c > $OUT/racecheck_${c// /_}.log 2>&1; echo "racecheck $c rc=$?"; tail -2 $OUT/racecheck_${c// /_}.log
done
timeout 300 python3 tools/bench_f32.py --d 64 128 256 --T 2048 4096 8192 16384 --tiles --families tf32x3 --errors --jobs 12 > $OUT/bench_f32.txt 2>&1; echo "bench rc=$?"
sed -n '/^# pass d T/,$p' $OUT/bench_f32.txt | grep -v "ieee\|torch_eff\| tf32 " | head -120
grep "FAILED" $OUT/test_tf32.log | head -20
