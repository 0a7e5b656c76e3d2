#!/usr/bin/env bash
# call 166 (NOTES v48): main at 9ba3606's successor: .ab/f16x3.patch + .ab/f16x3_bwd.patch + .ab/tf32_wide.patch
# (tf32_unstaged dropped after call 165) + Mbarrier::arrive_per_warp (a __syncwarp before lane
# 0's arrival on the consumers' empty barriers: call 164's racecheck hazards in the x3 dK/dV
# kernel): the whole GPU suite, racecheck on the x3 backward (the hazard's case) and on the 16-bit
# ws pair, then the wide 'tf32' forward against torch (.ab/call163.sh's bench, shorter), and the
# x3 kernels (now 'highest''s default on sm_90 from tile.WGMMA_F16X3_MIN_KEYS = 1024 keys) at
# short lengths beside the mma.sync 'highest' (the default below 1024 keys).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
rc() { echo "$1 rc=$2" >> $OUT/rcs.txt; }
(timeout 150 compute-sanitizer --tool racecheck --error-exitcode 1 python3 -c "
import numpy as np, cupy as cp, cuflash
from cuflash import TileConfig
r = np.random.default_rng(0)
f = lambda *s: cp.asarray(r.standard_normal(s).astype(np.float32))
for t in (TileConfig(64, 128, 12, 2, 'wgmma_f16x3'), TileConfig(64, 128, 12, 3, 'wgmma_f16x3')):
    for d, opts in ((64, dict(causal=True)), (64, {}), (40, dict(window=(9, 3), softcap=4.0))):
        q, k, v = f(1, 4, 300, d), f(1, 2, 333, d), f(1, 2, 333, d)
        _, res = cuflash.attention(q, k, v, return_residuals=True, **opts)
        cuflash.attention_backward(f(1, 4, 300, d), res, tile=t)
cp.cuda.Device().synchronize(); print('ok')" > $OUT/race_x3bwd.txt 2>&1; rc race_x3bwd $?) &
(timeout 150 compute-sanitizer --tool racecheck --error-exitcode 1 python3 tests/sanitize.py case float16 128 \
  > $OUT/race_f16.txt 2>&1; rc race_f16_128 $?) &
STEPS="env tests" JOBS=13 LIMIT_TESTS=400 TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
wait
timeout 100 python3 tools/bench_f32.py --x3 --no-torch --d 64 128 --T 512 1024 2048 --reps 3 \
  --jobs 14 > $OUT/bench_x3_short.txt 2>&1; echo "bench x3 short rc=$?"
timeout 80 python3 tools/bench_f32.py --pass bwd --x3 --no-torch --d 64 --T 512 1024 2048 --reps 3 \
  --jobs 14 > $OUT/bench_x3b_short.txt 2>&1; echo "bench x3 bwd short rc=$?"
timeout 120 python3 tools/bench_f32.py --wgmma --d 256 --T 4096 16384 --reps 3 \
  --jobs 14 > $OUT/bench_wide.txt 2>&1; echo "bench wide rc=$?"
echo "=================== SUMMARY"
cat $OUT/summary.txt $OUT/rcs.txt; for f in $OUT/race_*.txt; do echo "$f: $(tail -1 $f)"; done
grep -E "^(FAILED|ERROR)" $OUT/tests.log | head -20; tail -1 $OUT/tests.log
grep -E "^(fwd|bwd) " $OUT/bench_x3_short.txt $OUT/bench_x3b_short.txt | grep -E "f16x3|highest" | sort -u
grep -E "^fwd " $OUT/bench_wide.txt | grep -E "tf32|torch_eff" | sort -u | sort -k2,2n -k3,3n -k4,4n
