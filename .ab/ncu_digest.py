"""The few Nsight Compute figures call 269 reads (NOTES v97): per kernel, its duration, cycles,
SM active cycles, grid, registers, warp cycles per issued instruction, instructions; and the
largest warp stall reasons of a raw-page CSV.  python .ab/ncu_digest.py CSV..."""
import csv
import sys

KEEP = ("Duration", "Elapsed Cycles", "SM Active Cycles", "SM Frequency", "DRAM Throughput",
        "Grid Size", "Block Size", "Registers Per Thread", "Warp Cycles Per Issued Instruction",
        "Executed Instructions", "Issued Instructions", "Achieved Active Warps Per SM")


def table(path):
    lines = open(path, errors="replace").read().splitlines()
    start = [k for k, line in enumerate(lines) if line.startswith('"ID"')]
    return list(csv.reader(lines[start[0]:])) if start else []


for path in sys.argv[1:]:
    rows = table(path)
    if not rows:
        print(f"{path}: no table")
        continue
    head = rows[0]
    if "Metric Name" in head:      # details page
        for r in rows[1:]:
            d = dict(zip(head, r))
            if d["Metric Name"] in KEEP and "cupy" not in d["Kernel Name"]:
                print(f"{d['Kernel Name'][:40]:40s} {d['ID']:>3s} {d['Metric Name']:36s} "
                      f"{d['Metric Value']} {d['Metric Unit']}")
    else:                           # raw page: one row per kernel (after a units row)
        for r in rows[2:]:
            d = dict(zip(head, r))
            stalls = sorted(((float(v.replace(",", "")), k) for k, v in d.items()
                             if "issue_stalled" in k and v.replace(",", "").replace(".", "").isdigit()),
                            reverse=True)
            print(d.get("Kernel Name", "")[:40])
            for v, k in stalls[:10]:
                print(f"   {v:8.3f}  {k}")
