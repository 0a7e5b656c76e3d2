# NEXT SESSION (not run yet). Before: mkdir -p /tmp/two && git archive HEAD | tar -x -C /tmp/two &&
# (cd /tmp/two && git apply /work/main/.ab/tanh_two_op.patch) && tar -cf .ab/two.tar -C /tmp/two .
# 1. whole GPU suite (the softcap30 float32 floor of 1564b64 should make call 53's failure pass);
# 2. softcap's tanh: one special-function op (main) against two (.ab/tanh_two_op.patch), per-round
#    ratios to plain attention in each tree, 5 rounds; keep the faster (NOTES v17).
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
mkdir -p /tmp/two && tar -xf .ab/two.tar -C /tmp/two
STEPS="tests" JOBS=14 LIMIT_TESTS=270 TAIL=3 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head
for t in one two one two; do
  tree=$PWD; [ $t = two ] && tree=/tmp/two
  PYTHONPATH=$tree timeout 90 python tools/bench_variants.py --parts modifiers --rounds 3 >> $OUT/tanh_$t.txt 2>&1
done
echo "end at $((SECONDS - T0)) s"; tail -30 $OUT/tanh_one.txt $OUT/tanh_two.txt
