#!/usr/bin/env bash
# call 88: the online softmax's alpha exactly 1 while the max stands (NOTES v24): the long-T
# float32 probe after the change, the new long-key tests, their mutant, and A/B speed against
# the tree before (.ab/base: cuflash/ and kernels_cu/ of 7925101's successor, same kernels)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 100 python3 .ab/f32_lse_probe.py > $OUT/f32_lse_probe.txt 2>&1; echo "probe rc=$?"
timeout 200 python3 -m pytest -q -m gpu tests/test_long_keys.py -n 14 -rfEs -p no:cacheprovider > $OUT/long_keys.log 2>&1; echo "long keys rc=$?"
tail -2 $OUT/long_keys.log; grep -h "^FAILED\|^ERROR" $OUT/long_keys.log | cut -c1-300 | head -20
timeout 300 python3 tools/ab_speed.py --base .ab/base --new . --T 4096,16384 --rounds 2 > $OUT/ab.txt 2>&1; echo "ab rc=$?"
timeout 200 python3 tools/mutants.py --gpu gpu_alpha_an_ulp_off > $OUT/mutant.txt 2>&1; echo "mutant rc=$?"; tail -3 $OUT/mutant.txt
echo "=== probe"; cat $OUT/f32_lse_probe.txt
echo "=== ab"; tail -25 $OUT/ab.txt
