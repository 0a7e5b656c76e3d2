#!/usr/bin/env bash
# call 113 (issue 14): the split rule's fill, 1 against 2 blocks per SM, two passes
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
for pass in 1 2; do
  timeout 140 python3 tools/bench_kvcache.py --grid 1x1,1x8,2x8,4x8,8x8,16x8 --layouts contiguous --fill 1,2 --no-host --no-torch > $OUT/fill_$pass.txt 2>&1; echo "pass $pass rc=$?"
done
echo "=================== SUMMARY"
python3 - <<'PY'
import os, re
out = os.environ.get("OUT", "/tmp/out")
def rows(f):
    r = {}
    for l in open(f):
        m = re.match(r"\s*(\d+)\s+(\d+)\s+(\d+)\s+\d+\s+contiguous\s+([\d.nan]+)!?\s+([\d.nan]+)!?\s+([\d.nan]+)", l)
        if m: r[m.groups()[:3]] = tuple(float(x) for x in m.groups()[3:])
    return r
p = [rows(f"{out}/fill_{i}.txt") for i in (1, 2)]
print("B Hkv S   f1(p1,p2)  f2(p1,p2)  f1/f2(best)  read")
for k in sorted(p[0], key=lambda k: (int(k[0]) * int(k[1]), int(k[2]))):
    f1 = [x[k][0] for x in p if k in x]; f2 = [x[k][1] for x in p if k in x]
    print(*k, f1, f2, round(max(f1) / max(f2), 3), p[0][k][2])
PY
