#!/usr/bin/env bash
# call 231 (session 45): the mono arm (softcap's row max taken on the raw scores, off the chain
# through each element's tanh; .ab/mono_max_probe.diff) against base (.ab/base = main's kernels):
# wall time (.ab/softcap_ncu.py --time), bench_variants' modifiers (3 rounds) for both, and the
# softcap oracle tests of the wgmma families on the mono arm.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
declare -A DIR=([base]=.ab/base [mono]=.ab/arms/mono)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
for a in base mono; do PYTHONPATH=${DIR[$a]} timeout 120 python3 .ab/warm_variants.py > $OUT/warm_$a.txt 2>&1 & done
PYTHONPATH=$PWD/.ab/arms/mono timeout 120 python3 -m pytest -q -p no:cacheprovider -n 8 -m gpu tests/test_variants.py \
  -k "wgmma and (softcap or cap_alibi)" > $OUT/tests_mono.txt 2>&1
echo "tests mono rc=$?"; tail -1 $OUT/tests_mono.txt; grep "^FAILED" $OUT/tests_mono.txt | head -5
wait; echo "warm at ${SECONDS}s"
for a in base mono base mono; do
  PYTHONPATH=${DIR[$a]} timeout 60 python3 .ab/softcap_ncu.py --time >> $OUT/time_$a.txt 2>&1
done
for a in base mono; do
  [ $SECONDS -gt 100 ] && { echo "skip bench $a"; continue; }
  PYTHONPATH=${DIR[$a]} timeout 40 python3 ${DIR[$a]}/tools/bench_variants.py --parts modifiers --rounds 3 > $OUT/var_$a.txt 2>&1
done
for a in base mono; do echo "== $a"; cat $OUT/time_$a.txt; grep forward $OUT/var_$a.txt; done
echo "elapsed ${SECONDS}s"
