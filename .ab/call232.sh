#!/usr/bin/env bash
# call 232 (prepared in session 45 for the next session): v81, the wgmma forwards' lazy rescale
# (.ab/lazy16.patch). Before calling: `git apply .ab/lazy16.patch` in the working tree, and
# `rm -rf .ab/base && mkdir -p .ab/base && git archive HEAD cuflash kernels_cu tools | tar -x -C .ab/base`
# (main's kernels); carry=[".ab/base"].
# (1) GPU tests of the change: test_running_max_climbs, the wgmma forward and variant tests;
# (2) tools/ab_speed.py forward, float16 and bfloat16, d = 64 and 128, T = 4096 and 16384, causal
# and not, 2 rounds, against .ab/base; (3) bench_variants' modifiers on the new tree (3 rounds);
# (4) GPU mutant gpu_lazy_rescale_only_first_tile; (5) the whole GPU suite if time is left.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-580}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 16 -m gpu tests/test_forward.py tests/test_variants.py \
  tests/test_wgmma_tf32.py -k "climbs or wgmma" > $OUT/tests.txt 2>&1
echo "tests rc=$? at ${SECONDS}s"; tail -1 $OUT/tests.txt; grep "^FAILED" $OUT/tests.txt | head -8
timeout $((L - 330 - SECONDS)) python3 tools/ab_speed.py --base .ab/base --new . --dtypes float16,bfloat16 \
  --d 64,128 --T 4096,16384 --passes fwd --rounds 2 > $OUT/ab_fwd.txt 2>&1; echo "ab rc=$? at ${SECONDS}s"
timeout 60 python3 tools/bench_variants.py --parts modifiers --rounds 3 > $OUT/variants.txt 2>&1
timeout 90 python3 tools/mutants.py --gpu gpu_lazy_rescale_only_first_tile > $OUT/mutant.txt 2>&1
echo "mutant rc=$?"; tail -1 $OUT/mutant.txt
left=$((L - 10 - SECONDS))
if [ $left -gt 200 ]; then
  STEPS="env tests" LIMIT_TESTS=$left OUT=$OUT/gs TAIL=4 bash tests/gpu_session.sh 2>&1 | tail -6
  cd $OUT && tar czf gs.tgz gs && rm -rf gs; cd - > /dev/null
fi
grep -v "^round" $OUT/ab_fwd.txt | tail -20; grep forward $OUT/variants.txt
echo "elapsed ${SECONDS}s"
