export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
STEPS="env tests" JOBS=12 LIMIT_TESTS=220 TAIL=4 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
timeout 90 python3 tools/bench_variants.py > $OUT/variants_base.log 2>&1; echo "variants rc=$?" >> $OUT/san.txt
timeout 60 python3 tools/bench_decode.py > $OUT/decode.log 2>&1; echo "decode rc=$?" >> $OUT/san.txt
cat $OUT/summary.txt $OUT/san.txt; grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head -20; cat $OUT/variants_base.log; cat $OUT/decode.log
