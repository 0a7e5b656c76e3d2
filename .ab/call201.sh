#!/usr/bin/env bash
# call 201 (next session, v65, after call 200): the persistent x1 forward (.ab/x1_persist.patch:
# 'tf32''s forward at d = 97-128 on 12 warps; its blocks walk work items, the producer making
# the next item's Q rows in a second buffer). Carry .ab/base (git archive HEAD cuflash
# kernels_cu setup.cfg tools) for the A/B. 1. the x1 GPU tests on the patch (incl.
# test_wgmma_f16x1_persistent_walks_many_items); 2. ab_speed against main; 3. bench_f32 at
# d = 128 against torch.
# Prediction (NOTES v65): 'tf32' forward d = 128 new / main +12-18% at T = 2048 causal, +7-10%
# non-causal, +4-8% at 4096, 0..+3% at 16384 (v63's timeline: the block's start is 14.3% /
# 8.9% / 2.3% of SM time there; the epilogue, 6%, stays).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
git apply .ab/x1_persist.patch && echo "persist patch applied" >> $OUT/side.txt
# a hang guard first: one small persistent call (512 items) beside 'ieee''s result (printed);
# stop the call here if it hangs or fails
timeout 60 python3 - > $OUT/guard.txt 2>&1 <<'PY'
import numpy as np, cupy as cp, cuflash
from cuflash.tile import wgmma_f16x3_tiles
rng = cp.random.default_rng(0)
q, k, v = (rng.standard_normal((4, 16, 1000, 128), dtype=cp.float32) for _ in range(3))
t = wgmma_f16x3_tiles(128, kernel="wgmma_f16x1")
a = cuflash.attention(q, k, v, causal=True, tile=t[0]); cp.cuda.runtime.deviceSynchronize()
b = cuflash.attention(q, k, v, causal=True, precision="ieee")
print("guard max |persistent - ieee|", float(cp.abs(a - b).max()))
PY
rc=$?; echo "guard rc=$rc" >> $OUT/side.txt; cat $OUT/guard.txt | tail -3
if [ $rc -ne 0 ]; then echo "guard failed: stopping"; cat $OUT/side.txt; exit 1; fi
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 12 tests/test_wgmma_f16x1.py \
  -rfE > $OUT/tests.txt 2>&1; echo "tests rc=$?" >> $OUT/side.txt
timeout 200 python3 tools/ab_speed.py --base $PWD/.ab/base --new $PWD --dtypes float32:tf32 \
  --d 128 --T 2048,4096,16384 --passes fwd --causal 0,1 --rounds 2 --json $OUT/ab.json \
  > $OUT/ab.txt 2>&1; echo "ab rc=$?" >> $OUT/side.txt
timeout 100 python3 tools/bench_f32.py --x3 --d 128 --T 2048 4096 16384 --reps 3 --jobs 14 \
  > $OUT/bench_fwd.txt 2>&1; echo "bench rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"; cat $OUT/side.txt; tail -2 $OUT/tests.txt
grep -E "FAILED|ERROR" $OUT/tests.txt | head; tail -9 $OUT/ab.txt
grep -E " (tf32|torch_eff) " $OUT/bench_fwd.txt | awk '{print $1,$2,$3,$4,$5,$6,$7}'
