#!/usr/bin/env bash
# v85 + v86 + v87 on a GPU (prepared in session 49; .ab/bwd85_87.patch applied to main's tree):
# the backward's P beside dP's product, the dQ and dK products carried into the next step, the
# steps' passes as functors (NVRTC 13.0 refuses generic lambdas in device code: call 250).
# Against main's kernels (.ab/base: `git archive HEAD cuflash kernels_cu tools | tar -x -C
# .ab/base` before applying the patch; carry [".ab/base"]). LIMIT: the call's seconds; steps in
# order, each if time allows:
#   tests     the whole GPU suite (LIMIT >= 500; 260 s), else the backward's and GQA/varlen tests
#   ab        tools/ab_speed.py --passes bwd, d = 128 and 64, T = 4096, 16384, float16 and
#             bfloat16, 2 rounds (1 when short)
#   mutants   gpu_bwd_probs_unmasked (v85)
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-585}
left() { echo $((L - SECONDS)); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
if [ $L -ge 500 ]; then
  STEPS="env tests" LIMIT_TESTS=260 OUT=$OUT/gs TAIL=6 bash tests/gpu_session.sh 2>&1 | tail -8
  (cd $OUT && tar czf gs.tgz gs && rm -rf gs)
else
  PYTHONPATH=$PWD timeout $(( L * 3 / 10 )) python3 -m pytest -q -m gpu -p no:cacheprovider -n 16 -rfE \
    tests/test_backward.py tests/test_gpu_kernels.py tests/test_gqa.py tests/test_varlen.py \
    -k "(wgmma or gqa or varlen) and (float16 or bfloat16) and not tf32" > $OUT/tests.txt 2>&1
  echo "tests rc=$?"; tail -8 $OUT/tests.txt
fi
echo "tests done at ${SECONDS}s"
t=$(( $(left) - 50 )); [ $t -gt 240 ] && t=240
rounds=2; [ $t -lt 180 ] && rounds=1
cells="--dtypes float16,bfloat16 --d 128,64 --T 4096,16384"
[ $t -lt 120 ] && cells="--dtypes float16 --d 128,64 --T 8192"
[ $t -gt 40 ] && PYTHONPATH=$PWD timeout $t python3 tools/ab_speed.py --base .ab/base --new . \
  $cells --passes bwd --rounds $rounds > $OUT/ab.txt 2>&1
echo "ab rc=$? at ${SECONDS}s"; grep -v "^round" $OUT/ab.txt | tail -24
t=$(( $(left) - 5 )); [ $t -gt 60 ] && t=60
[ $t -gt 30 ] && PYTHONPATH=$PWD timeout $t python3 tools/mutants.py --gpu gpu_bwd_probs_unmasked \
  > $OUT/mutants.txt 2>&1
echo "mutants rc=$? at ${SECONDS}s"; tail -3 $OUT/mutants.txt
echo "elapsed ${SECONDS}s"
