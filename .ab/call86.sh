#!/usr/bin/env bash
# call 86 (next session, first): issue 12's family matrix (tests/test_layout_families.py, written
# after session 16's last device call), the general packed kernel's diagonal (.ab/packed_probe2.py),
# issue 15's long-T float32 error (.ab/f32_longT.py)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 300 python3 -m pytest -q -m gpu tests/test_layout_families.py -n 14 -rfE -p no:cacheprovider > $OUT/families.log 2>&1; echo "families rc=$?"
tail -3 $OUT/families.log; grep -h "^FAILED\|^ERROR" $OUT/families.log | head -20
for v in self general jside; do   # the general packed kernel's diagonal (NOTES v23)
  timeout 120 ncu --csv --print-units base --profile-from-start off --metrics gpu__time_duration.sum -k regex:fwd \
      python .ab/packed_probe2.py $v > $OUT/probe2_$v.csv 2> $OUT/probe2_$v.err || echo "probe $v failed"
  python3 - $OUT/probe2_$v.csv $v <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
m = rows[0].index("Metric Value"); names = ["dense", "view", "packed"]; t = collections.defaultdict(list)
for i, r in enumerate(rows[1:]):
    t[names[i % 3]].append(float(r[m].replace(",", "")) / 1e6)
md = lambda x: sorted(x)[len(x) // 2]
print(f"{sys.argv[2]:8s}", "  ".join(f"{n} {md(t[n]):.3f}" for n in names), f" packed/view {md(t['packed']) / md(t['view']):.3f}")
PY
done
rm -f $OUT/probe2_*.err
timeout 200 python3 .ab/f32_longT.py > $OUT/f32_longT.txt 2>&1; echo "f32 longT rc=$?"; cat $OUT/f32_longT.txt | tail -25
timeout 120 python3 tools/bench_issue12.py --parts varlen --rounds 5 --min-ms 20 > $OUT/issue12_varlen.txt 2>&1; echo "issue12 varlen rc=$?"
grep -v "^ *$" $OUT/issue12_varlen.txt | tail -14
