#!/usr/bin/env bash
# call 79: issue 12's packed-kernel probe (which Seq field costs the 4.7%), the whole GPU suite at
# main (the TF32 tiles at d = 96 and 129-255 untested since call 77), a decode step's host profile
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt
for v in base lens starts none; do
  timeout 150 ncu --csv --profile-from-start off --print-units base --metrics gpu__time_duration.sum -k regex:fwd \
      python .ab/packed_probe.py $v > $OUT/probe_$v.csv 2> $OUT/probe_$v.err; echo "probe $v rc=$?"
  python3 - $OUT/probe_$v.csv $v <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; k = head.index("Kernel Name"); m = head.index("Metric Value")
names = ["dense", "view", "packed"]
t = collections.defaultdict(list)
for i, r in enumerate(rows[1:]):
    t[names[i % 3]].append(float(r[m].replace(",", "")) / 1e6)
print(sys.argv[2], "  ".join(f"{n} {' '.join(f'{x:.3f}' for x in t[n])} ms" for n in names))
PY
  grep -h "max|diff|" $OUT/probe_$v.err
done
STEPS="env tests" JOBS=14 LIMIT_TESTS=330 TAIL=3 timeout 330 bash tests/gpu_session.sh > $OUT/session.log 2>&1
tail -5 $OUT/session.log
grep -h "^FAILED\|^ERROR" $OUT/tests.log | head -20
timeout 90 python3 .ab/decode_host.py > $OUT/decode_host.txt 2>&1; echo "decode host rc=$?"; head -40 $OUT/decode_host.txt
