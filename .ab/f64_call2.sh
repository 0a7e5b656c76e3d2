# issue 15 (float64 dmma), device call 2: the whole float64 GPU tier, a planted bug, the final bench
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c 'import cupy, torch, sys; print(sys.version.split()[0], "cupy", cupy.__version__, "torch", torch.__version__)') > $OUT/env.txt 2>&1
timeout 160 python3 -m pytest -q -m gpu -k "float64 or f64 or dmma" tests -rfE -p no:cacheprovider -n 14 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
# planted bug: P·V's fourth k-step reads key row 8n + 2t + 8 instead of + 9 (sm_90's m16n8k16 path)
cp kernels_cu/dmma.cuh /tmp/dmma.cuh.orig
sed -i 's/lds_d2(row + 9 \* LDS + 16 \* q)/lds_d2(row + 8 * LDS + 16 * q)/' kernels_cu/dmma.cuh
(grep -c "row + 8 \* LDS + 16 \* q" kernels_cu/dmma.cuh; timeout 35 python3 .ab/f64_smoke.py) > $OUT/mutant.log 2>&1; echo "mutant smoke rc=$? (1 = the bug was caught)" >> $OUT/mutant.log
cp /tmp/dmma.cuh.orig kernels_cu/dmma.cuh
timeout 95 python3 tools/bench_f64.py --d 64 128 --T 2048 4096 8192 16384 --errors --jobs 16 --csv $OUT/bench.csv > $OUT/bench.log 2>&1; echo "bench rc=$?" >> $OUT/bench.log
cat $OUT/env.txt; grep -E "^FAILED|^ERROR" $OUT/tests.log | head -15; tail -2 $OUT/tests.log; grep -E "BAD|smoke|rc=" $OUT/mutant.log | tail -4
grep -E "^err " $OUT/bench.log; sed -n '/^# method/,$p' $OUT/bench.log; tail -1 $OUT/bench.log
