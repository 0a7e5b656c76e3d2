# call 51: the persistent ws forward with dynamic tile claims (persistent-exp patch on main 2741d47,
# carried as .ab/pers.tar) against main, same run; issue 11's variant timings on both trees
export MPLBACKEND=Agg PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
mkdir -p /tmp/pers && tar -xf .ab/pers.tar -C /tmp/pers
(cd /tmp/pers && PYTHONPATH=/tmp/pers timeout 90 compute-sanitizer --tool racecheck --print-limit 5 python .ab/ws_small.py) > $OUT/racecheck.txt 2>&1; grep -E "RACECHECK SUMMARY" $OUT/racecheck.txt
(cd /tmp/pers && PYTHONPATH=/tmp/pers timeout 90 compute-sanitizer --tool memcheck --print-limit 5 python .ab/ws_small.py) > $OUT/memcheck.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/memcheck.txt
CUFLASH_PERSISTENT=dynamic PYTHONPATH=$PWD timeout 200 python tools/ab_speed.py --base . --new /tmp/pers --passes fwd --dtypes float16 --d 64,128 --rounds 2 --json $OUT/ab_dynamic.json > $OUT/ab_dynamic.txt 2>&1; echo "ab rc $?"
(PYTHONPATH=$PWD timeout 70 python tools/bench_variants.py) > $OUT/variants_main.txt 2>&1
(cd /tmp/pers && CUFLASH_PERSISTENT=dynamic PYTHONPATH=/tmp/pers timeout 70 python tools/bench_variants.py) > $OUT/variants_pers.txt 2>&1
(cd /tmp/pers && CUFLASH_PERSISTENT=dynamic PYTHONPATH=/tmp/pers timeout 150 python -m pytest -q -x -n 14 tests/test_gpu_kernels.py tests/test_variants.py -p no:cacheprovider) > $OUT/tests.txt 2>&1; tail -3 $OUT/tests.txt
tail -22 $OUT/ab_dynamic.txt; echo "== main"; cat $OUT/variants_main.txt; echo "== pers"; cat $OUT/variants_pers.txt
