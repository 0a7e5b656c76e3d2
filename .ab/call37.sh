# issue 12: per-round ratios (rotating order) for gqa and strided; GQA vs MHA kernel times by ncu
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
timeout 150 ncu --profile-from-start off --nvtx --print-summary none --csv \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct \
  python .ab/gqa_ncu.py > $OUT/gqa_ncu.csv 2> $OUT/gqa_ncu.err
python - <<'PY' > $OUT/gqa_ncu.txt
import csv, collections, os
lines = [l for l in open(os.environ["OUT"] + "/gqa_ncu.csv") if l.startswith('"')]
rows = list(csv.DictReader(lines))
by = collections.OrderedDict()
for r in rows:
    tag = " ".join(r[c] for c in r if "nvtx" in c.lower() and r[c])
    key = (int(r["ID"]), tag, r["Kernel Name"][:50])
    by.setdefault(key, {})[r["Metric Name"]] = r["Metric Value"]
for (i, tag, k), m in by.items():
    print(f"{i:3} {tag[:30]:30} {k:50} " + "  ".join(f"{n.split('__')[1][:18]}={v}" for n, v in sorted(m.items())))
PY
cat $OUT/gqa_ncu.txt | head -80; tail -3 $OUT/gqa_ncu.err
timeout 330 python tools/bench_issue12.py --parts gqa,strided --rounds 15 --min-ms 20 > $OUT/bench_issue12.txt 2>&1
timeout 90 python .ab/window_sweep.py > $OUT/window_sweep.txt 2>&1
cat $OUT/env.txt $OUT/bench_issue12.txt $OUT/window_sweep.txt
