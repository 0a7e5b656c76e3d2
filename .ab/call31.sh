# v13 second rule (wave-sized sections): targeted GPU tests, the simt softcap dq case at d06d481 and here, order A/B, GQA ranks
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 150 python -m pytest -q -m gpu -n 14 tests/test_block_order.py tests/test_gqa.py tests/test_split_kv.py tests/test_empty.py -p no:cacheprovider > $OUT/tests.log 2>&1
tail -1 $OUT/tests.log; grep -E "^FAILED|^ERROR" $OUT/tests.log | head -10
K="simt-float32-97-131-64-softcap30"
timeout 60 python -m pytest -q tests/test_variants.py -k "$K" -p no:cacheprovider > $OUT/softcap_new.log 2>&1; grep -E "passed|failed|rel. error" $OUT/softcap_new.log | head -4
mkdir -p /tmp/base && tar -xf .ab/base.tar -C /tmp/base && (cd /tmp/base && PYTHONPATH=/tmp/base timeout 60 python -m pytest -q tests/test_variants.py -k "$K" -p no:cacheprovider > $OUT/softcap_base.log 2>&1; grep -E "passed|failed|rel. error" $OUT/softcap_base.log | head -4)
timeout 150 python tools/bench_order.py --d 128,64 > $OUT/bench_order.txt 2>&1
timeout 100 python tools/bench_order.py --d 128 --ranks 1,2,4 --G 1,4,8,16 --rounds 3 > $OUT/ranks.txt 2>&1
cat $OUT/ranks.txt | tail -10
grep -E "True|False" $OUT/bench_order.txt | awk '{print $1,$2,$3,$4,$5,$8,$9}' | column -t | tail -96
