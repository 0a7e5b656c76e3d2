#!/usr/bin/env bash
# call 224 (session 44; HEAD 0e70a60 = b0aa0da's code: v78 + kDmmaPairs): (1) the whole GPU
# suite (never run after v78; covers DMMA_BWD's new 64x32x4x2 tile); (2) float64 forward at the
# default tile against torch's math path, same run (issue 15's bar at d = 64 and 128);
# (3) .ab/f64_bwd_tiles.py (d = 64: 64x32x4x2, the m16n8k16 dQ path, against the default);
# (4) v78's two GPU mutants.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" LIMIT_TESTS=${LIMIT_TESTS:-320} OUT=$OUT/gs TAIL=4 bash tests/gpu_session.sh
timeout 60 python3 .ab/f64_tiles.py --d 128 --T 4096 16384 --reps 5 \
  --tiles 128x16x8x2,64x32x8x2 > $OUT/f64_fwd.txt 2>&1
echo "f64 fwd 128 rc=$?"
timeout 60 python3 .ab/f64_tiles.py --d 64 --T 4096 16384 --reps 5 \
  --tiles 128x64x8x2,128x32x8x2,128x16x8x2 >> $OUT/f64_fwd.txt 2>&1
echo "f64 fwd 64 rc=$?"
timeout 70 python3 .ab/f64_bwd_tiles.py --d 64 --T 4096 16384 --reps 5 > $OUT/f64_bwd.txt 2>&1
echo "f64 bwd rc=$?"
if [[ $SECONDS -lt 470 ]]; then
  timeout $((580 - SECONDS)) python3 tools/mutants.py --gpu gpu_dmma_abt_k_orders_disagree \
    gpu_drows_m16_columns > $OUT/mutants.txt 2>&1; echo "mutants rc=$?"; tail -5 $OUT/mutants.txt
fi
echo "=== summary"; cat $OUT/gs/summary.txt; grep -E "passed|failed" $OUT/gs/tests.log | tail -2
grep -E "^FAILED|^ERROR" $OUT/gs/tests.log | head -8
grep -v "^# 20" $OUT/f64_fwd.txt | tail -24; grep -v "^# 20" $OUT/f64_bwd.txt | tail -12
echo "elapsed ${SECONDS}s"
