#!/usr/bin/env bash
# v84 on a GPU (session 47 prepared it; no device came): the speculative softmax of the 16-bit
# wgmma forwards against main's kernels. Needs `git apply .ab/spec84.patch` first (or a working
# tree that has it) and carry [".ab/base"] (`git archive a38030c cuflash kernels_cu tools | tar -x
# -C .ab/base`). LIMIT: the call's seconds; each step runs if the time left allows, most
# important first:
#   tests     the whole GPU suite (LIMIT >= 560), else the tests that reach the changed forwards
#             (the running-max tests: rescale and redo at d = 128; the 16-bit wgmma forwards'
#             oracle tests and score variants; LIMIT < 300: the running-max tests alone)
#   ab        tools/ab_speed.py fwd, d = 128 (changed) and 64 (the control), T = 4096, 16384,
#             2 rounds (1 when short)
#   mutants   gpu_spec_moved_rows_not_rescaled, gpu_spec_never_redoes, gpu_row_max_skips_last
#   variants  bench_variants' modifiers for base, then new
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-590}
left() { echo $((L - SECONDS)); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
if [ $L -ge 560 ]; then
  STEPS="env tests" LIMIT_TESTS=300 OUT=$OUT/gs TAIL=6 bash tests/gpu_session.sh 2>&1 | tail -8
  (cd $OUT && tar czf gs.tgz gs && rm -rf gs)
else
  if [ $L -ge 300 ]; then
    set -- tests/test_forward.py "tests/test_gpu_kernels.py::test_tiles_against_oracle" tests/test_variants.py \
      -k "running_max or (wgmma and (float16 or bfloat16) and not bwd)"; t=200
  else
    set -- tests/test_forward.py -k running_max; t=75
  fi
  PYTHONPATH=$PWD timeout $t python3 -m pytest -q -m gpu -p no:cacheprovider -n 16 -rfE "$@" > $OUT/tests.txt 2>&1
  echo "tests rc=$?"; tail -12 $OUT/tests.txt
fi
echo "tests done at ${SECONDS}s"
t=$(( $(left) - 30 )); [ $t -gt 190 ] && t=190
rounds=2; [ $t -lt 120 ] && rounds=1
[ $t -gt 30 ] && PYTHONPATH=$PWD timeout $t python3 tools/ab_speed.py --base .ab/base --new . \
  --dtypes float16,bfloat16 --d 128,64 --T 4096,16384 --passes fwd --rounds $rounds > $OUT/ab.txt 2>&1
echo "ab rc=$? at ${SECONDS}s"; grep -v "^round" $OUT/ab.txt | tail -22
t=$(( $(left) - 5 )); [ $t -gt 60 ] && t=60
if [ $t -gt 35 ]; then
  PYTHONPATH=$PWD timeout $t python3 tools/mutants.py --gpu gpu_spec_moved_rows_not_rescaled \
    gpu_spec_never_redoes gpu_row_max_skips_last > $OUT/mutants.txt 2>&1
  echo "mutants rc=$? at ${SECONDS}s"; tail -5 $OUT/mutants.txt
fi
for a in .ab/base . ; do
  [ $(left) -gt 30 ] && PYTHONPATH=$PWD/$a timeout $(( $(left) - 5 )) python3 tools/bench_variants.py \
    --parts modifiers --rounds 2 > $OUT/variants_$(basename $(realpath $a)).txt 2>&1
done
for f in $OUT/variants_*.txt; do [ -f "$f" ] && { echo "== $f"; grep -i "forward\|ms" $f | head -12; }; done
echo "elapsed ${SECONDS}s"
