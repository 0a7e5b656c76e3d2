#!/usr/bin/env bash
# call 118 (issue 14): split-KV merge v29b: each lane stages its own chunk of many splits (cp.async, two buffers)
# (split_combine.cuh, v29): decode A/B against .ab/base (92039a4: register loads, 8 splits in
# flight), a fill-2 / 256-split probe at B·Hkv = 1, the split/kv GPU tests of every family
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
G="--grid 1x1,1x8,4x8,8x8,32x8,64x8 --S 1024,8192,32768,131072 --layouts contiguous --no-host --no-torch"
for pass in 1 2; do
  echo "== A/B pass $pass"
  (cd .ab/base && PYTHONPATH=$PWD timeout 100 python3 tools/bench_kvcache.py $G > $OUT/ab_base_$pass.txt 2>&1); echo "base rc=$?"
  timeout 100 python3 tools/bench_kvcache.py $G > $OUT/ab_new_$pass.txt 2>&1; echo "new rc=$?"
done
echo "== splits probe (caps 32, 64, 128)"
P="--grid 1x1,1x4 --S 8192,32768,131072 --layouts contiguous --no-host"
timeout 150 python3 tools/bench_kvcache.py $P --max-splits 32,64,128 > $OUT/probe_f1.txt 2>&1; echo "probe f1 rc=$?"
timeout 280 python3 -m pytest -q -m gpu -n 14 -p no:cacheprovider -rfE tests/test_split_kv.py tests/test_kvcache.py \
  tests/test_decode_tiles.py tests/test_tf32.py tests/test_gqa.py > $OUT/tests.txt 2>&1; echo "tests rc=$?"
echo "=================== SUMMARY"
tail -3 $OUT/tests.txt
python3 - <<'PY'
import os, re
out = os.environ.get("OUT", "/tmp/out")
def rows(f):
    r = {}
    for l in open(f):
        m = re.match(r"\s*(\d+)\s+(\d+)\s+(\d+)\s+\d+\s+contiguous\s+([\d.nan]+)!?\s+([\d.nan]+)", l)
        if m: r[m.groups()[:3]] = (float(m.group(4)), float(m.group(5)))
    return r
b = [rows(f"{out}/ab_base_{p}.txt") for p in (1, 2)]
n = [rows(f"{out}/ab_new_{p}.txt") for p in (1, 2)]
print("B Hkv S   base(p1,p2)  new(p1,p2)  new/base(best)  new/read")
for k in sorted(b[0], key=lambda k: (int(k[0]) * int(k[1]), int(k[2]))):
    bb = [x[k][0] for x in b if k in x]; nn = [x[k][0] for x in n if k in x]
    if not bb or not nn: continue
    print(*k, " ".join(f"{v:.3f}" for v in bb), "|", " ".join(f"{v:.3f}" for v in nn),
          f"| {max(nn)/max(bb):.3f} | {max(nn)/n[0][k][1]:.2f}")
PY
for f in probe_f1; do echo "-- $f"; grep contiguous $OUT/$f.txt | cut -c1-120; done
