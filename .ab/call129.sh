#!/usr/bin/env bash
# calls 129 / 130 (session 24, on branch tma-bwd: `git checkout tma-bwd`, rebased on main if
# main moved; .ab/base = main's tree: `git archive main cuflash kernels_cu setup.cfg | tar -x -C
# .ab/base`, carried). Each part fits one device call (600 s):
#   bash .ab/call129.sh tests   the branch's backward tests first (the dK/dV kernel on the copy
#                               engine, e529d8c, has never run on a GPU: a hang shows as that
#                               step's timeout), then the whole GPU suite
#   bash .ab/call129.sh speed   the backward A/B over every cell (d = 64 causal lost 1.5-1.8% in
#                               call 126), the backward against cuDNN and FA2, and issue 11's
#                               variant ratios on the v30 forward (plain got ~9% faster)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
case ${1:-tests} in
  tests)
    timeout 150 python3 -m pytest -q -m gpu -n 14 -p no:cacheprovider -rfE -x tests/test_backward.py \
      tests/test_gpu_kernels.py -k "backward or bwd or tensor_maps" > $OUT/bwd_first.txt 2>&1
    echo "backward first rc=$?"; tail -3 $OUT/bwd_first.txt
    STEPS="env tests" JOBS=14 LIMIT_TESTS=300 TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
    echo "=================== SUMMARY"; cat $OUT/summary.txt; tail -3 $OUT/tests.log ;;
  speed)
    timeout 110 python3 tools/ab_speed.py --base .ab/base --new . --passes bwd --T 4096,16384 --dtypes float16 --rounds 2 \
      > $OUT/ab_bwd.txt 2>&1; echo "ab rc=$?"
    timeout 150 python3 tools/bench_fwd_tiles.py --pass bwd --tiles default --T 4096,16384 --rounds 2 --reps 5 \
      --json $OUT/bwd_vs_torch.json > $OUT/bwd_vs_torch.txt 2>&1; echo "bench rc=$?"
    timeout 120 python3 tools/bench_variants.py --parts window,modifiers --rounds 2 > $OUT/variants.txt 2>&1
    echo "variants rc=$?"
    echo "=================== SUMMARY"
    tail -30 $OUT/ab_bwd.txt; tail -20 $OUT/bwd_vs_torch.txt; tail -12 $OUT/variants.txt ;;
esac
