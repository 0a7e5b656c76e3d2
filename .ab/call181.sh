#!/usr/bin/env bash
# call 181 (next session; NOTES v57): x1's dQ kernel on 64-key tiles and a third stage at
# d = 128, on a tree with `git apply .ab/x1_dq64.patch`, against main (.ab/base: git archive
# <main> cuflash kernels_cu setup.cfg tools | tar -x -C .ab/base; carry [".ab/base"]):
#  - the A/B of 'tf32''s backward (ab_speed passes the precision to the backward since 7b7e1f9);
#  - bench_f32 --pass bwd --x3 at d = 128 (x1 s2 and s3 by name, torch's ratio);
#  - the whole GPU suite on the patched tree.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 140 python3 tools/ab_speed.py --base $PWD/.ab/base --new $PWD --dtypes float32:tf32 \
  --d 128 --T 2048,4096,16384 --passes bwd --causal 0,1 --rounds 2 --json $OUT/ab.json \
  > $OUT/ab.txt 2>&1; echo "ab rc=$?" >> $OUT/side.txt
timeout 90 python3 tools/bench_f32.py --pass bwd --x3 --d 128 --T 2048 4096 16384 --reps 3 \
  --jobs 14 > $OUT/bench_bwd.txt 2>&1; echo "bench bwd rc=$?" >> $OUT/side.txt
STEPS="env tests" JOBS=12 LIMIT_TESTS=330 TAIL=3 OUT=/tmp/gs bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "^(FAILED|ERROR)" /tmp/gs/tests.log > $OUT/failures.txt; tail -3 /tmp/gs/tests.log >> $OUT/failures.txt
echo "=================== SUMMARY"
cat /tmp/gs/summary.txt $OUT/side.txt; head -20 $OUT/failures.txt
tail -12 $OUT/ab.txt
grep -hE "^bwd " $OUT/bench_bwd.txt | grep -E "f16x1|torch_eff| tf32 |mma_tf32" | sort -u
