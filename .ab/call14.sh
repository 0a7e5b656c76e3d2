export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
STEPS="env tests" JOBS=12 LIMIT_TESTS=240 TAIL=4 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
timeout 90 python3 tools/bench_variants.py > $OUT/variants.log 2>&1; echo "variants rc=$?" >> $OUT/san.txt
timeout 200 python3 tools/bench_kvcache.py > $OUT/kvcache.log 2>&1; echo "kvcache rc=$?" >> $OUT/san.txt
cat $OUT/summary.txt $OUT/san.txt; grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head -30; cat $OUT/variants.log; cat $OUT/kvcache.log
