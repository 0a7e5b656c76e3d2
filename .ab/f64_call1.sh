# issue 15 (float64 dmma), device call 1: smoke (m16 and m8 paths), bench + ablation, fast GPU tier
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; python3 -c 'import cupy, torch, sys; print(sys.version.split()[0], "cupy", cupy.__version__, "torch", torch.__version__)'; git log -1 --format='%H %s') > $OUT/env.txt 2>&1
timeout 45 python3 .ab/f64_smoke.py > $OUT/smoke.log 2>&1; echo "smoke rc=$?" >> $OUT/smoke.log
CUFLASH_BENCH_M8=1 timeout 35 python3 .ab/f64_smoke.py > $OUT/smoke_m8.log 2>&1; echo "smoke_m8 rc=$?" >> $OUT/smoke_m8.log
timeout 100 python3 tools/bench_f64.py --d 64 128 --T 2048 4096 8192 --tiles --simt --errors --jobs 16 --csv $OUT/bench.csv > $OUT/bench.log 2>&1; echo "bench rc=$?" >> $OUT/bench.log
CUFLASH_BENCH_M8=1 timeout 25 python3 tools/bench_f64.py --d 64 128 --T 4096 --causal no --no-torch --jobs 16 --csv $OUT/bench.csv > $OUT/bench_m8.log 2>&1; echo "bench_m8 rc=$?" >> $OUT/bench_m8.log
timeout 80 python3 -m pytest -q -m "gpu and not slow" -k "float64 or f64 or dmma" tests -rfE -p no:cacheprovider -n 14 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/tests.log
cat $OUT/env.txt; tail -4 $OUT/smoke.log; tail -3 $OUT/smoke_m8.log; grep -E "^FAILED|^ERROR" $OUT/tests.log | head -15; tail -2 $OUT/tests.log; tail -3 $OUT/bench_m8.log
grep -E "^err " $OUT/bench.log; sed -n '/^# method/,$p' $OUT/bench.log; tail -1 $OUT/bench.log
