# issue 12's remaining cells at the kernel level: strided view vs contiguous (causal), GQA G=4 vs 1 causal T=2048
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
timeout 150 ncu --profile-from-start off --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct python .ab/layout_ncu.py > $OUT/layout_ncu.csv 2> $OUT/layout_ncu.err
python - <<'PY'
import csv, collections, os
lines = [l for l in open(os.environ["OUT"] + "/layout_ncu.csv") if l.startswith('"')]
by = collections.OrderedDict()
for r in csv.DictReader(lines):
    by.setdefault((int(r["ID"]), r["Kernel Name"][:48]), {})[r["Metric Name"]] = r["Metric Value"]
for (i, k), m in by.items():
    print(f"{i:3} {k:48} " + "  ".join(f"{n.split('__')[1][:14]}={v}" for n, v in sorted(m.items())))
PY
tail -2 $OUT/layout_ncu.err
