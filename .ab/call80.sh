#!/usr/bin/env bash
# call 80: issue 12's packed-kernel probe, bisected (.ab/packed_probe.py's variants)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
for v in ${VARIANTS:-base lens tq sk shfl maskp blockp}; do
  timeout 120 ncu --csv --print-units base --profile-from-start off --metrics gpu__time_duration.sum -k regex:fwd \
      python .ab/packed_probe.py $v > $OUT/probe_$v.csv 2> $OUT/probe_$v.err || echo "probe $v failed"
  python3 - $OUT/probe_$v.csv $v <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; m = head.index("Metric Value")
names = ["dense", "view", "packed"]
t = collections.defaultdict(list)
for i, r in enumerate(rows[1:]):
    t[names[i % 3]].append(float(r[m].replace(",", "")) / 1e6)
md = lambda x: sorted(x)[len(x) // 2]
print(f"{sys.argv[2]:7s}", "  ".join(f"{n} {' '.join(f'{x:.3f}' for x in t[n])}" for n in names),
      f"  packed/view {md(t['packed']) / md(t['view']):.3f}")
PY
done
