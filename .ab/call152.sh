#!/usr/bin/env bash
# call 152 (branch tf32-copies, NOTES v40): the TF32 wgmma forward's GPU tests, then bench_f32
# --wgmma on main (.ab/base: git archive main cuflash kernels_cu setup.cfg tools) and the branch.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
PYTHONPATH=$PWD timeout 120 python3 -m pytest -q -m gpu -n 14 -p no:cacheprovider -rfE tests/test_wgmma_tf32.py \
  > $OUT/tests.txt 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests.txt
grep -q " passed" $OUT/tests.txt && ! grep -q failed $OUT/tests.txt || { tail -30 $OUT/tests.txt; exit 1; }
(cd .ab/base && PYTHONPATH=$PWD timeout 150 python3 tools/bench_f32.py --wgmma --d 64 128 --T 1024 2048 4096 16384 \
  --reps 3 --jobs 14 --no-torch > $OUT/bench_base.txt 2>&1); echo "base rc=$?"
PYTHONPATH=$PWD timeout 150 python3 tools/bench_f32.py --wgmma --d 64 128 --T 1024 2048 4096 16384 --reps 3 --jobs 14 \
  --no-torch > $OUT/bench_new.txt 2>&1; echo "new rc=$?"
echo "=================== SUMMARY"
python3 - $OUT <<'PY'
import sys
def rows(f):
    r = {}
    for line in open(f):
        x = line.split()
        if len(x) >= 6 and x[0] == "fwd" and not line.startswith("#"):
            r[tuple(x[1:5])] = float(x[5])
    return r
b, n = rows(sys.argv[1] + "/bench_base.txt"), rows(sys.argv[1] + "/bench_new.txt")
print("d T causal method base new new/base")
for k in sorted(n, key=lambda k: (int(k[0]), int(k[1]), k[2], k[3])):
    if k[3] in ("wgmma_tf32", "mma_tf32"):
        print(*k, b.get(k), n[k], f"{n[k] / b[k]:.3f}" if b.get(k) else "-")
PY
