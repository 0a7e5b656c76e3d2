# call 195: per-kernel time of 'tf32' calls at issue 15's short cells (ncu), one process a cell
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; mkdir -p $OUT
for c in ${CELLS:-0 1 2 3 4 5 6}; do
  timeout 120 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed --csv python3 .ab/breakdown.py $c > $OUT/ncu_$c.csv 2> $OUT/ncu_$c.err
  echo "cell $c rc=$?"
done
for c in ${CELLS:-0 1 2 3 4 5 6}; do
python3 - $OUT/ncu_$c.csv <<'PY'
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
print(next((r[0] for r in rows if r and r[0].startswith("CELL")), "?"))
hdr = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
h = rows[hdr]; ix = {k: h.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Value")}
per = collections.OrderedDict()
for r in rows[hdr + 1:]:
    if len(r) < len(h): continue
    per.setdefault((int(r[ix["ID"]]), r[ix["Kernel Name"]][:60]), {})[r[ix["Metric Name"]]] = r[ix["Metric Value"]]
tot = sum(float(m.get("gpu__time_duration.sum", "0").replace(",", "")) for m in per.values()) / 1000
for (i, name), m in per.items():
    t = float(m.get("gpu__time_duration.sum", "0").replace(",", "")) / 1000
    print(f" {t:8.1f}us {t/tot:5.1%} grid {m.get('launch__grid_size')} regs {m.get('launch__registers_per_thread')} sm% {m.get('sm__throughput.avg.pct_of_peak_sustained_elapsed')} dram% {m.get('dram__throughput.avg.pct_of_peak_sustained_elapsed')} {name}")
print(f" total {tot:.1f}us")
PY
done
