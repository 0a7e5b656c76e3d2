#!/usr/bin/env bash
# v84 + v85 on a GPU (session 48): the speculative softmax of the 16-bit wgmma forwards (v84,
# .ab/spec84.patch) and the backward's P taken beside dP's product (v85, .ab/overlap85.patch),
# against main's kernels (.ab/base: `git archive a38030c cuflash kernels_cu tools | tar -x -C
# .ab/base`; carry [".ab/base"]). The working tree must hold both patches (session 49: and v86,
# .ab/dqpipe86.patch, the dQ kernel's product running into its next step). Call 250 ran it;
# superseded by .ab/run_bwd85_87.sh (v84 dropped). LIMIT: the call's
# seconds; steps in order, each if time allows:
#   tests     the whole GPU suite (LIMIT >= 560; 300 s), else the tests of the changed kernels
#   ab        tools/ab_speed.py, fwd and bwd, d = 128 and 64, T = 4096, 16384, float16 and
#             bfloat16, 1 round (2 when time allows)
#   mutants   v84's and v85's GPU mutants
#   variants  bench_variants' modifiers (softcap, ALiBi over plain), base then new
# (it replaces session 47's run_v84.sh)
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-585}
left() { echo $((L - SECONDS)); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
if [ $L -ge 560 ]; then
  STEPS="env tests" LIMIT_TESTS=300 OUT=$OUT/gs TAIL=6 bash tests/gpu_session.sh 2>&1 | tail -8
  (cd $OUT && tar czf gs.tgz gs && rm -rf gs)
else
  set -- tests/test_forward.py tests/test_backward.py "tests/test_gpu_kernels.py" tests/test_variants.py \
    -k "running_max or (wgmma and (float16 or bfloat16))"
  [ $L -lt 260 ] && set -- tests/test_forward.py tests/test_gpu_kernels.py -k "running_max or (tiles_against_oracle and wgmma and float16)"
  PYTHONPATH=$PWD timeout $(( L * 6 / 20 )) python3 -m pytest -q -m gpu -p no:cacheprovider -n 16 -rfE "$@" > $OUT/tests.txt 2>&1
  echo "tests rc=$?"; tail -12 $OUT/tests.txt
  # v87's ring count runs over a GQA group's heads; v87 pipelines packed batches at d = 64
  PYTHONPATH=$PWD timeout $(( L * 3 / 20 )) python3 -m pytest -q -m gpu -p no:cacheprovider -n 16 -rfE \
    tests/test_gqa.py tests/test_varlen.py -k "float16 or bfloat16" > $OUT/tests_gqa.txt 2>&1
  echo "gqa/varlen tests rc=$?"; tail -6 $OUT/tests_gqa.txt
fi
echo "tests done at ${SECONDS}s"
t=$(( $(left) - 75 )); [ $t -gt 260 ] && t=260; [ $L -lt 260 ] && t=$(( $(left) - 8 ))
rounds=2; [ $t -lt 200 ] && rounds=1
cells="--dtypes float16,bfloat16 --d 128,64 --T 4096,16384"
[ $t -lt 160 ] && cells="--dtypes float16 --d 128,64 --T 8192"   # a short call: 8 cells a tree
[ $t -gt 40 ] && PYTHONPATH=$PWD timeout $t python3 tools/ab_speed.py --base .ab/base --new . \
  $cells --passes fwd,bwd --rounds $rounds > $OUT/ab.txt 2>&1
echo "ab rc=$? at ${SECONDS}s"; grep -v "^round" $OUT/ab.txt | tail -40
t=$(( $(left) - 5 )); [ $t -gt 70 ] && t=70
[ $t -gt 35 ] && PYTHONPATH=$PWD timeout $t python3 tools/mutants.py --gpu gpu_spec_moved_rows_not_rescaled \
    gpu_spec_never_redoes gpu_bwd_probs_unmasked > $OUT/mutants.txt 2>&1
echo "mutants rc=$? at ${SECONDS}s"; tail -5 $OUT/mutants.txt
for a in .ab/base . ; do
  [ $(left) -gt 40 ] && PYTHONPATH=$PWD/$a timeout $(( $(left) - 5 )) python3 tools/bench_variants.py \
    --parts modifiers --rounds 2 > $OUT/variants_$(basename $(realpath $a)).txt 2>&1
done
for f in $OUT/variants_*.txt; do [ -f "$f" ] && { echo "== $f"; grep -i "forward\|ms" $f | head -12; }; done
echo "elapsed ${SECONDS}s"
