#!/usr/bin/env bash
# call 185 (next session): the two waiting patches together on main,
#   git apply .ab/x1_fwd_default.patch .ab/x1_chain.patch
# (NOTES v59, v60; the StagedKV refactor merged as byte-identical cubins), against main (.ab/base: git archive <main>
# cuflash kernels_cu setup.cfg tools | tar -x -C .ab/base; carry [".ab/base"]):
#  - the whole GPU suite on the patched tree (300 s);
#  - the A/B of 'tf32' forward (v59: x1 at d = 128) and backward (v60: chained sums).
# Merge what the suite and the A/B bear out; call 186 then measures the float32 tables.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=12 LIMIT_TESTS=320 TAIL=3 OUT=/tmp/gs bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "^(FAILED|ERROR)" /tmp/gs/tests.log > $OUT/failures.txt; tail -3 /tmp/gs/tests.log >> $OUT/failures.txt
timeout 230 python3 tools/ab_speed.py --base $PWD/.ab/base --new $PWD --dtypes float32:tf32 \
  --d 64,128 --T 2048,16384 --passes fwd,bwd --causal 0,1 --rounds 2 --json $OUT/ab.json \
  > $OUT/ab.txt 2>&1; echo "ab rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"
cat /tmp/gs/summary.txt $OUT/side.txt; head -30 $OUT/failures.txt; tail -20 $OUT/ab.txt
