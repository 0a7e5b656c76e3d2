#!/usr/bin/env bash
# call 229 (session 45): v80, softcap's P partly on the FMA pipe (issue 11).
# (1) the arms' kernels compiled side by side (.ab/warm_variants.py) while (2) the GPU tests of the
# change run on the working tree: tests/test_exp2.py and the softcap variants of the wgmma
# families; (3) tools/bench_variants.py --parts modifiers, 3 rounds, for the working tree (ON_FMA
# 6), .ab/base (HEAD before v80), .ab/arms/rcp (tanh's reciprocal by Newton on the FMA pipe, P on
# ex2.approx), on8 and on4; (4) GPU mutant gpu_ex2_poly_coefficient_off.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-560}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/env.txt
python3 -c "import cupy, torch; print('cupy', cupy.__version__, 'cuda rt', cupy.cuda.runtime.runtimeGetVersion(), 'torch', torch.__version__)" >> $OUT/env.txt 2>&1
date -u >> $OUT/env.txt
declare -A DIR=([new]=. [base]=.ab/base [on8]=.ab/arms/on8 [on4]=.ab/arms/on4 [rcp]=.ab/arms/rcp)
for a in new base rcp on8 on4; do
  (PYTHONPATH=${DIR[$a]} timeout 200 python3 .ab/warm_variants.py > $OUT/warm_$a.txt 2>&1; echo "warm $a rc=$?" >> $OUT/warm_$a.txt) &
done
PYTHONPATH=$PWD timeout 170 python3 -m pytest -q -p no:cacheprovider -n 12 -m gpu tests/test_exp2.py tests/test_variants.py \
  -k "exp2 or (wgmma and (softcap or cap_alibi))" > $OUT/tests.txt 2>&1
echo "tests rc=$? at ${SECONDS}s"; grep -E "passed|failed" $OUT/tests.txt | tail -1; grep -E "^FAILED" $OUT/tests.txt | head -8
wait; tail -qn 1 $OUT/warm_*.txt; echo "warm done at ${SECONDS}s"
for a in new base rcp on8 on4; do
  left=$((L - 40 - SECONDS)); [ $left -lt 30 ] && { echo "skip bench $a"; continue; }
  PYTHONPATH=${DIR[$a]} timeout $left python3 ${DIR[$a]}/tools/bench_variants.py --parts modifiers --rounds 3 > $OUT/var_$a.txt 2>&1
  echo "bench $a rc=$? at ${SECONDS}s"
done
left=$((L - 5 - SECONDS))
if [ $left -gt 60 ]; then
  timeout $left python3 tools/mutants.py --gpu gpu_ex2_poly_coefficient_off > $OUT/mutant.txt 2>&1
  echo "mutant rc=$?"; tail -2 $OUT/mutant.txt
fi
for a in new base rcp on8 on4; do echo "== $a"; grep -E "forward" $OUT/var_$a.txt; done
echo "elapsed ${SECONDS}s"
