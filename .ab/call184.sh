#!/usr/bin/env bash
# call 184 (session 35; NOTES v58): the working tree (v58 staging + the d <= 64 TF32 staging
# kernel) against 82252dd (.ab/base; carry [".ab/base"]):
#  - the GPU tests of the code changed since call 183's suite (TF32 staging and forward, the
#    f16 staging) and the GPU mutant of the hi-only rows;
#  - the staging kernels' bandwidth (.ab/stage_time.py);
#  - the A/B of 'tf32' forward and backward at T 2048 / 4096.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
XD=$(python3 -c "import xdist" 2>/dev/null && echo "-n 8")
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu $XD tests/test_wgmma_tf32.py \
  tests/test_wgmma_tf32_wide.py tests/test_f16x3_stage.py > $OUT/tests.txt 2>&1; echo "tests rc=$?" >> $OUT/side.txt
timeout 60 python3 .ab/stage_time.py --stage-only > $OUT/stage_time.txt 2>&1; echo "stage rc=$?" >> $OUT/side.txt
timeout 230 python3 tools/ab_speed.py --base $PWD/.ab/base --new $PWD --dtypes float32:tf32 \
  --d 64,128 --T 2048,4096 --passes fwd,bwd --causal 0,1 --rounds 2 --json $OUT/ab.json \
  > $OUT/ab.txt 2>&1; echo "ab rc=$?" >> $OUT/side.txt
timeout 80 python3 tools/mutants.py --gpu gpu_f16x1_inverse_after_lo > $OUT/mutant.txt 2>&1; echo "mutant rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"
cat $OUT/side.txt; tail -2 $OUT/tests.txt; tail -2 $OUT/mutant.txt
grep -E "stage|copy" $OUT/stage_time.txt
tail -20 $OUT/ab.txt
