export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
STEPS="env tests" JOBS=12 LIMIT_TESTS=240 TAIL=4 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
timeout 80 python3 tools/bench_variants.py > $OUT/variants.log 2>&1; echo "variants rc=$?" >> $OUT/san.txt
timeout 230 python3 -m cuflash run experiments/kv_cache.yaml --out $OUT/kv_cache > $OUT/kv_cache.log 2>&1; echo "kv_cache rc=$?" >> $OUT/san.txt
tar -czf $OUT/kv_cache.tgz -C $OUT kv_cache kv_cache.log && rm -rf $OUT/kv_cache
cat $OUT/summary.txt $OUT/san.txt; grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head -20; cat $OUT/variants.log; tail -5 $OUT/kv_cache.log
