"""Print the telling columns of an `ncu --csv --page raw` file: per launch, its duration, the
instructions by pipe, the tensor pipe's use, and the stall reasons above a threshold."""
import csv, sys

rows = list(csv.reader(open(sys.argv[1])))
start = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
head, data = rows[start], [r for r in rows[start + 2:] if len(r) == len(rows[start])]
col = {h: i for i, h in enumerate(head)}
want = [h for h in head if h in ("gpu__time_duration.sum", "sm__inst_executed.sum",
                                 "launch__registers_per_thread", "sm__throughput.avg.pct_of_peak_sustained_elapsed")
        or ("inst_executed_pipe_" in h and h.endswith(".sum")) or "gmma" in h or "tensor" in h]
stalls = [h for h in head if "issue_stalled" in h and h.endswith("per_warp_active.pct")]
for r in data:
    print("==", r[col["Kernel Name"]][:90])
    for h in want:
        try:
            if float(r[col[h]].replace(",", "")) != 0: print(f"   {h} = {r[col[h]]}")
        except ValueError:
            pass
    st = sorted(((float(r[col[h]].replace(",", "") or 0), h) for h in stalls), reverse=True)[:8]
    print("   stalls:", ", ".join(f"{h.split('stalled_')[1].split('_per')[0]} {v:.1f}" for v, h in st))
