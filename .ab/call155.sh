#!/usr/bin/env bash
# call 155 (branch wgmma-desc, NOTES v41): which half of the branch moved the TF32 forward
# (.ab/base = main, .ab/mid = 15e5864 desc_plus alone, . = + review mends), then the 16-bit
# forward and backward A/B of main against the branch. Kernels precompiled per tree first.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
M='^cuflash_wgmma_.*_d(64|128)_m[0-9]+_n[0-9]+_w[0-9]+_s[0-9]+(_causal)?$'
for t in .ab/base .ab/mid .; do
  (cd $t && PYTHONPATH=$PWD timeout 90 python3 -m cuflash compile --arch sm_90 --jobs 14 \
     --no-experiments --match "$M" > /dev/null 2>&1; echo "compile $t rc=$?")
done
export PYTHONPATH=$PWD
timeout 90 python3 tools/ab_speed.py --base .ab/base --new .ab/mid --dtypes float32:tf32 --passes fwd \
  --T 4096,16384 --rounds 2 > $OUT/ab_tf32_base_mid.txt 2>&1; echo "tf32 base/mid rc=$?"
timeout 90 python3 tools/ab_speed.py --base .ab/mid --new . --dtypes float32:tf32 --passes fwd \
  --T 4096,16384 --rounds 2 > $OUT/ab_tf32_mid_new.txt 2>&1; echo "tf32 mid/new rc=$?"
timeout 300 python3 tools/ab_speed.py --base .ab/base --new . --passes fwd,bwd --T 4096,16384 \
  --rounds 1 --json $OUT/ab16.json > $OUT/ab16.txt 2>&1; echo "16-bit rc=$?"
for f in ab_tf32_base_mid ab_tf32_mid_new ab16; do echo "== $f"; grep -v "^round" $OUT/$f.txt | tail -40; done
