# issue 12: per-round ratios (rotating order) for gqa and strided; GQA vs MHA kernel times by ncu
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
timeout 150 ncu --profile-from-start off --nvtx --print-summary none --csv \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct \
  python .ab/gqa_ncu.py > $OUT/gqa_ncu.csv 2> $OUT/gqa_ncu.err
python - <<'PY' > $OUT/gqa_ncu.txt
import csv, collections, os
rows = list(csv.DictReader(l for l in open(os.environ["OUT"] + "/gqa_ncu.csv") if l.startswith('"')))
agg = collections.defaultdict(list)
for r in rows:
    rng = [c for c in r if c.startswith("thread_domain") or c.lower().startswith("nvtx")]
    tag = next((r[c] for c in r if "NVTX" in c or "nvtx" in c), "")
    agg[(tag, r["Kernel Name"][:60], r["Metric Name"])].append(float(r["Metric Value"].replace(",", "")))
for (tag, k, m), v in sorted(agg.items()):
    print(f"{tag:40.40} {k:60} {m:32} {min(v):14.3f} {max(v):14.3f}")
PY
cat $OUT/gqa_ncu.txt | head -80; tail -3 $OUT/gqa_ncu.err
timeout 330 python tools/bench_issue12.py --parts gqa,strided --rounds 15 --min-ms 20 > $OUT/bench_issue12.txt 2>&1
cat $OUT/env.txt $OUT/bench_issue12.txt
