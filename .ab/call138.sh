#!/usr/bin/env bash
# call 138 (next session, branch tf32-bwd rebased on main): the TF32 backward after call 137.
# Since then: the tests' fixes (host alibi slopes, product_unit for 'tf32'), and the dK/dV
# kernel's pair of warps per 16 keys at d > 64 (S-warp / dP-warp; never run). Parts, each one
# device call:
#   bash .ab/call138.sh tests   TF32 backward and float32 backward GPU tests, the GPU mutants,
#                               the backward's speed (prediction, NOTES v33: d = 128 'highest'
#                               and 'tf32' +20-30% over call 137's 19.6-20.7 and 56-59 TFLOP/s,
#                               i.e. their ratio to 'ieee' from ~1.05 / ~3.0 to ~1.3 / ~3.7)
#                               and the 16-bit mma dQ kernel (now through HalfProducts: S and dP
#                               no longer interleaved) A/B'd against main's (.ab/base = `git archive
#                               main cuflash kernels_cu setup.cfg | tar -x -C .ab/base`, carried);
#                               prediction: within ±3%
#   bash .ab/call138.sh suite   the whole GPU suite (the default float32 backward changes)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
case ${1:-tests} in
  tests)
    timeout 150 python3 -m pytest -q -m gpu -n 14 -p no:cacheprovider -rfE tests/test_tf32.py \
      tests/test_backward.py tests/test_precision_backward.py -k "backward and (tf32 or float32)" \
      > $OUT/tests.txt 2>&1; echo "tests rc=$?"; tail -4 $OUT/tests.txt
    timeout 90 python3 tools/mutants.py --gpu gpu_tf32_bwd_pair_handover gpu_tf32_bwd_one_product \
      > $OUT/mutants.txt 2>&1; echo "mutants rc=$?"
    timeout 150 python3 tools/bench_f32.py --pass bwd --d 64 128 --T 4096 16384 --reps 3 --jobs 14 \
      --tiles --families tf32x3 \
      > $OUT/bench_bwd.txt 2>&1; echo "bench rc=$?"
    timeout 120 python3 tools/ab_speed.py --base .ab/base --new . --passes bwd --bwd-tile 64x64x4x1:mma \
      --T 4096,16384 --dtypes float16 --rounds 2 > $OUT/ab_mma_dq.txt 2>&1; echo "ab rc=$?"
    echo "=================== SUMMARY"; grep -E "passed|failed" $OUT/tests.txt | tail -2
    tail -3 $OUT/mutants.txt; grep -A40 "^# pass" $OUT/bench_bwd.txt | head -40
    tail -10 $OUT/ab_mma_dq.txt ;;
  suite)
    STEPS="env tests" JOBS=14 LIMIT_TESTS=300 TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
    echo "=================== SUMMARY"; cat $OUT/summary.txt; tail -3 $OUT/tests.log ;;
esac
