#!/usr/bin/env bash
# Session 52, call 267: v96 landed (DECODE_MAX_SPLITS = 64): the decode and split-KV GPU tests,
# then the new default against the old cap (auto@128) beside cuDNN.
export PYTHONPATH=$PWD
mkdir -p $OUT
timeout 100 python3 -m pytest -q -m gpu tests/test_kvcache.py tests/test_decode_tiles.py \
  tests/test_split_kv.py tests/test_kv_cache_experiments.py -n 16 -p no:cacheprovider -rfE > $OUT/kvtests.txt 2>&1
echo "kvtests rc=$?"; tail -2 $OUT/kvtests.txt
timeout 60 python3 .ab/ring_ab.py auto@128 1x1x8192,1x1x16384,1x1x32768,1x1x65536,1x1x131072,2x1x32768,1x2x16384 \
  > $OUT/v96c.txt 2>&1; echo "v96c rc=$?"; tail -8 $OUT/v96c.txt
