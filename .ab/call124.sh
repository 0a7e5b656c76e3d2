#!/usr/bin/env bash
# call 124 (v30): the ws forward's producer on the copy engine (TMA). Smoke test, then the whole
# GPU suite, forward A/B against .ab/base (HEAD before TMA), ncu of the new forward.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 150 python3 .ab/tma_smoke.py > $OUT/smoke.txt 2>&1; echo "smoke rc=$?"; tail -3 $OUT/smoke.txt
if ! grep -q "SMOKE OK" $OUT/smoke.txt; then tail -40 $OUT/smoke.txt; exit 1; fi
timeout 200 python3 tools/ab_speed.py --base .ab/base --new . --passes fwd --T 2048,8192,16384 --rounds 2 > $OUT/ab.txt 2>&1; echo "ab rc=$?"
STEPS="env tests" JOBS=14 LIMIT_TESTS=280 TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
timeout 100 ncu --profile-from-start off --set full -k regex:fwd -o /tmp/fwd python3 .ab/fwd_ncu.py >> $OUT/session.txt 2>&1
ncu -i /tmp/fwd.ncu-rep --print-details all > $OUT/fwd_details.txt 2>&1
echo "=================== SUMMARY"
cat $OUT/summary.txt; tail -4 $OUT/tests.log
grep -E "^  cuflash|Duration|Pipe Tensor Cycles Active  |Issue Slots Busy|Executed Instructions  " $OUT/fwd_details.txt | head -12
tail -22 $OUT/ab.txt
