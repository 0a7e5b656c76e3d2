#!/usr/bin/env bash
# call 176 (NOTES v52-v54; carry [".ab/arms/d128"]):
#  - beside: on a copy of main with .ab/x3_split_barrier.patch (v53: CopiesAndStores), racecheck
#    of the x3 kernels (expected: forward and dQ clean; dK/dV's per-warp-arrival reports as at
#    main, call 168);
#  - the x3 backward tests of .ab/arms/d128 (v54, .ab/x3_bwd_d128.patch: the pair at d = 128 on
#    32-query tiles, opt-in), d = 64 and 128;
#  (254 s of device budget left: no benchmark; issue 15's ratios in the next session's call)
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
D128=$PWD/.ab/arms/d128
SPLIT=/tmp/split; mkdir -p $SPLIT; cp -r cuflash kernels_cu tools tests setup.cfg $SPLIT/
(cd $SPLIT && patch -p1 -s < $OLDPWD/.ab/x3_split_barrier.patch) || echo "patch failed"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
(PYTHONPATH=$SPLIT timeout 70 compute-sanitizer --tool racecheck --error-exitcode 1 python3 .ab/x3_race.py > /tmp/race.txt 2>&1; echo "racecheck rc=$?"; tail -2 /tmp/race.txt
 grep "Error: Race" /tmp/race.txt | sed 's/+0x[0-9a-f]*//g' | sort | uniq -c
 head -c 12000 /tmp/race.txt > $OUT/race_head.txt
) > $OUT/side.txt 2>&1 &
(cd $D128 && PYTHONPATH=$D128 timeout 80 python3 -m pytest -q -p no:cacheprovider -n 12 -m gpu \
  tests/test_wgmma_f16x3.py tests/test_f16x3_stage.py -k "backward or staging" -rfE) > $OUT/tests_d128.txt 2>&1
echo "tests d128 rc=$?" > $OUT/tests_rc.txt
wait
echo "=================== SUMMARY"
cat $OUT/env.txt $OUT/side.txt $OUT/tests_rc.txt; tail -1 $OUT/tests_d128.txt
grep -E "^(FAILED|ERROR)" $OUT/tests_d128.txt | head -20
