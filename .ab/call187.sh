#!/usr/bin/env bash
# call 187 (next session; NOTES v60): `git apply .ab/x1_chain.patch` on the working tree, against
# main (.ab/base: git archive <main> cuflash kernels_cu setup.cfg tools; carry [".ab/base"]):
# the x1 GPU tests and mutants, then the A/B of 'tf32''s backward.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
XD=$(python3 -c "import xdist" 2>/dev/null && echo "-n 8")
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu $XD tests/test_wgmma_f16x1.py \
  tests/test_f16x3_stage.py > $OUT/tests.txt 2>&1; echo "tests rc=$?" >> $OUT/side.txt
timeout 90 python3 tools/mutants.py --gpu gpu_f16x1_chain_not_from_zero gpu_f16x1_inverse_after_lo \
  > $OUT/mutants.txt 2>&1; echo "mutants rc=$?" >> $OUT/side.txt
timeout 220 python3 tools/ab_speed.py --base $PWD/.ab/base --new $PWD --dtypes float32:tf32 \
  --d 64,128 --T 2048,4096,16384 --passes bwd --causal 0,1 --rounds 2 --json $OUT/ab.json \
  > $OUT/ab.txt 2>&1; echo "ab rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"
cat $OUT/side.txt; tail -2 $OUT/tests.txt; tail -3 $OUT/mutants.txt; tail -16 $OUT/ab.txt
