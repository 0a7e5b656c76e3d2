#!/usr/bin/env bash
# Call 272 (prepared in session 53, NOTES v101): pages of 16 and 32 on the 64-key decode tile, each
# warp staging its own keys from its own page. Before the call: `git apply .ab/pages101.patch`
# (it holds v98's warp-local staging too). (1) racecheck and memcheck on small launches (pages of
# 64, 32, 16, contiguous; append; splits); (2) the KV-cache and split-KV GPU tests, every dtype;
# (3) the old page tiles against the 64-key tile in one process (pages of 16, 32). The key-split
# tests (test_decode_tiles.py) run the sliced loader on prefill tiles too (the stepped path).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 40 python3 .ab/warp_race.py > $OUT/race_warm.txt 2>&1; echo "warm rc=$?"; tail -1 $OUT/race_warm.txt
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 1 python3 .ab/warp_race.py > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$?"
timeout 40 compute-sanitizer --tool memcheck --error-exitcode 1 python3 .ab/warp_race.py > $OUT/memcheck.txt 2>&1; echo "memcheck rc=$?"
timeout 200 python3 -m pytest -q -m gpu tests/test_kvcache.py tests/test_split_kv.py tests/test_decode_tiles.py -p no:cacheprovider -n 16 > $OUT/kvtests.txt 2>&1; echo "kvtests rc=$?"; tail -2 $OUT/kvtests.txt
for p in 16 32; do timeout 90 python3 .ab/pages_ab.py $p > $OUT/pages$p.txt 2>&1; echo "pages $p rc=$?"; done
tail -1 $OUT/racecheck.txt; tail -1 $OUT/memcheck.txt
for p in 16 32; do echo "== pages of $p"; grep -E "^check|S=" $OUT/pages$p.txt | tail -8 | cut -c1-150; done
