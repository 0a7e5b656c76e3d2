export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -m gpu tests/test_variants.py tests/test_kvcache.py tests/test_varlen.py tests/test_split_kv.py tests/test_head_dims.py tests/test_gqa.py -rfE -p no:cacheprovider -n 12 > $OUT/tests.log 2>&1; echo "tests rc=$?" >> $OUT/san.txt
timeout 90 python3 tools/bench_variants.py > $OUT/variants.log 2>&1; echo "variants rc=$?" >> $OUT/san.txt
timeout 60 python3 .ab/prof_decode.py > $OUT/prof.log 2>&1; echo "prof rc=$?" >> $OUT/san.txt
timeout 240 python3 tools/bench_kvcache.py > $OUT/kvcache.log 2>&1; echo "kvcache rc=$?" >> $OUT/san.txt
cat $OUT/san.txt; grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head -20; grep -E "^E  " $OUT/tests.log | head -10; cat $OUT/variants.log; head -40 $OUT/prof.log | tail -28; cat $OUT/kvcache.log
