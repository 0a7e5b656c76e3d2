#!/usr/bin/env bash
# call 91: the long-sequence float32 test (T = S = 16384, NOTES v25) and its mutant; then a probe
# on this copy only: the float32 GPU tests with helpers.FLOORS float32 at 2.5e-7 instead of 2e-6
# (the floor's reason, the CUDA-core kernels' key-by-key sums, is gone since v25)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 200 python3 -m pytest -q -m gpu tests/test_long_keys.py -k long_sequence -n 8 -rfEs -p no:cacheprovider --durations=3 > $OUT/long_seq.log 2>&1; echo "long seq rc=$?"
tail -6 $OUT/long_seq.log; grep -h "^FAILED\|^ERROR\|Error:" $OUT/long_seq.log | cut -c1-300 | head
timeout 200 python3 tools/mutants.py --gpu gpu_simt_running_sum > $OUT/mutant.txt 2>&1; echo "mutant rc=$?"; tail -4 $OUT/mutant.txt
sed -i 's/"float32": 2e-6,/"float32": 2.5e-7,/' tests/helpers.py; grep -n '^FLOORS' tests/helpers.py
timeout 200 python3 -m pytest -q -m gpu tests -k "float32 or f32 or tf32 or simt or highest or ieee" -n 14 -rfE -p no:cacheprovider > $OUT/floor_probe.log 2>&1; echo "floor probe rc=$?"
tail -2 $OUT/floor_probe.log; grep -h "^E  *AssertionError" $OUT/floor_probe.log | cut -c1-260 | sort | uniq | head -30
git checkout tests/helpers.py 2>/dev/null || sed -i 's/"float32": 2.5e-7,/"float32": 2e-6,/' tests/helpers.py
