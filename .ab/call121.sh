#!/usr/bin/env bash
# call 121: compute-sanitizer over the decode path at main (tests/sanitize.py kv, now with 256
# forced splits: the v29b merge's batches); then .ab/var (split_combine.cuh's counter as one
# acq_rel atomic by thread 0 after the barrier, no __threadfence per thread) against main on
# small/medium decode steps (2 passes), and var's split-KV GPU tests
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
SANITIZE_ARGS=kv LIMIT_SANITIZE=150 STEPS="env sanitize" TAIL=4 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
G="--grid 1x1,1x8,8x8 --S 1024,8192,32768 --layouts contiguous --no-host --no-torch"
for pass in 1 2; do
  timeout 60 python3 tools/bench_kvcache.py $G > $OUT/ab_main_$pass.txt 2>&1; echo "main rc=$?"
  (cd .ab/var && PYTHONPATH=$PWD timeout 60 python3 tools/bench_kvcache.py $G > $OUT/ab_var_$pass.txt 2>&1); echo "var rc=$?"
done
(cd .ab/var && PYTHONPATH=$PWD timeout 120 python3 -m pytest -q -m gpu -n 14 -p no:cacheprovider -rfE tests/test_split_kv.py > $OUT/var_tests.txt 2>&1); echo "var tests rc=$?"
echo "=================== SUMMARY"
cat $OUT/summary.txt; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $OUT/sanitize.log
tail -2 $OUT/var_tests.txt
python3 - <<'PY'
import os, re
out = os.environ.get("OUT", "/tmp/out")
def rows(f):
    r = {}
    for l in open(f):
        m = re.match(r"\s*(\d+)\s+(\d+)\s+(\d+)\s+\d+\s+contiguous\s+([\d.]+)!?\s+([\d.]+)", l)
        if m: r[m.groups()[:3]] = float(m.group(4))
    return r
b = [rows(f"{out}/ab_main_{p}.txt") for p in (1, 2)]
n = [rows(f"{out}/ab_var_{p}.txt") for p in (1, 2)]
print("B Hkv S   main(p1,p2)  var(p1,p2)  var/main(best)")
for k in sorted(b[0], key=lambda k: (int(k[0]) * int(k[1]), int(k[2]))):
    bb = [x[k] for x in b if k in x]; nn = [x[k] for x in n if k in x]
    if bb and nn: print(*k, bb, nn, f"{max(nn)/max(bb):.3f}")
PY
