#!/usr/bin/env bash
# call 194 (next session): 1. the whole GPU suite on main (v62 and the later Python changes have
# not had it; call 190 ran it on f3cca44). 2. .ab/f16x_thread_arrival.patch (every consumer
# thread arrives on the x1 / x3 forward's and dQ kernel's empty barriers, 128·NC a phase
# instead of 4·NC: racecheck's per-warp-arrival reports, NOTES v62; the dK/dV kernel keeps the
# per-warp arrival: per-thread, its d = 64 causal softcap kernels spill 56-76 bytes under NVRTC
# 13.5): racecheck over x1 and x3, their GPU tests, and the A/B against main (.ab/base: git
# archive HEAD cuflash kernels_cu setup.cfg tools; carry it). Prediction: racecheck reports
# only in the dK/dV kernels (calls 192-193: 82,688 on x1, 26,624 of them dK/dV); speed
# 0.99-1.01 (256 arrivals a tile where there were 8).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=12 LIMIT_TESTS=290 TAIL=3 OUT=/tmp/gs bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "^(FAILED|ERROR)" /tmp/gs/tests.log > $OUT/failures.txt; tail -3 /tmp/gs/tests.log >> $OUT/failures.txt
git apply .ab/f16x_thread_arrival.patch && echo "arrival patch applied" >> $OUT/side.txt
for fam in wgmma_f16x1 wgmma_f16x3; do
  timeout 150 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 1 \
    python3 .ab/x1_race.py $fam > $OUT/race_$fam.txt 2>&1; echo "race $fam rc=$?" >> $OUT/side.txt
done
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu -n 12 tests/test_wgmma_f16x1.py \
  tests/test_wgmma_f16x3.py -rfE > $OUT/tests_arrival.txt 2>&1; echo "tests rc=$?" >> $OUT/side.txt
timeout 150 python3 tools/ab_speed.py --base $PWD/.ab/base --new $PWD \
  --dtypes float32:tf32,float32:highest --d 64,128 --T 4096 --passes fwd,bwd --causal 0 \
  --rounds 1 --json $OUT/ab.json > $OUT/ab.txt 2>&1; echo "ab rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"; cat /tmp/gs/summary.txt $OUT/side.txt; head -12 $OUT/failures.txt
for f in $OUT/race_*.txt; do echo "$f: $(grep SUMMARY $f)"; done
tail -3 $OUT/tests_arrival.txt; tail -12 $OUT/ab.txt
