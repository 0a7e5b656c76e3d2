#!/usr/bin/env bash
# call 85: the strided backward's kernels under ncu (clocks locked): view against contiguous
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
for c in 0 1; do for l in view contiguous; do
  timeout 100 ncu --csv --print-units base --profile-from-start off --metrics gpu__time_duration.sum \
      python .ab/strided_ncu.py $l $c > $OUT/strided_${l}_$c.csv 2>/dev/null
  python3 - $OUT/strided_${l}_$c.csv $l $c <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; m = h.index("Metric Value"); k = h.index("Kernel Name")
t = collections.defaultdict(float)
for r in rows[1:]:
    t[r[k][:60]] += float(r[m].replace(",", "")) / 3e6
print(f"causal={sys.argv[3]} {sys.argv[2]:10s} total {sum(t.values()):.3f} ms/call  " +
      "  ".join(f"{n}: {x:.3f}" for n, x in t.items()))
PY
done; done
