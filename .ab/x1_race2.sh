#!/usr/bin/env bash
# x1 racecheck, read out: every hazard's (kind, reader pc, writer pc) counted, and the SASS of the
# forward kernel whose hazards call 10 showed (built here by NVRTC, cuobjdump -sass).
export PYTHONPATH=$PWD; OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 240 compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 100000 \
  python3 .ab/x1_race.py 2>&1 | grep -E "Potential|Read Thread|Write Thread|SUMMARY" \
  | sed -E 's/\([0-9]+,[0-9]+,[0-9]+\)//g; s/0x[0-9a-f]+ in block  ://' > $OUT/race_lines.txt
echo "race lines: $(wc -l < $OUT/race_lines.txt)"
python3 - <<'PY' > $OUT/race_pairs.txt
import collections, os
L = open(os.environ.get("OUT", "/tmp/out") + "/race_lines.txt").read().splitlines()
c = collections.Counter()
for i, l in enumerate(L):
    if "Potential" in l and i + 2 < len(L):
        c[(l.split("Potential")[1].split("hazard")[0].strip(), L[i+1].split(" at ")[-1].strip(),
           L[i+2].split(" at ")[-1].strip())] += 1
for k, n in c.most_common():
    print(n, *k)
print([l for l in L if "SUMMARY" in l])
PY
head -40 $OUT/race_pairs.txt
python3 - <<'PY'
import os, subprocess
from cuflash.gpu import build, precompile
names = {"cuflash_wgmma_f16x1_fwd_f32_d64_m128_n64_w12_s2"}
for s in precompile.default_specs("sm_90"):
    if s.name in names:
        p = build.cubin_for_arch(build.source(s), s.name, "sm_90a")
        sass = subprocess.run(["cuobjdump", "-sass", str(p)], capture_output=True, text=True).stdout
        open(os.environ["OUT"] + f"/{s.name}.sass", "w").write(sass)
        print(s.name, len(sass))
PY
