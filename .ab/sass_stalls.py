"""Summarize an ncu source page (SASS) exported as CSV: `ncu -i REP --page source --csv
--print-source sass > page.csv` (session 46, for call 241). Prints the kernel's total warp-stall
samples, the share per opcode, and the N instructions with most samples, each with its address,
text and its largest stall reasons. Column names vary between ncu versions, so they are found by
substring: the source text ("Source"), the address ("Address"), all-samples ("Warp Stall Sampling
(All Samples)"), and any per-reason stall columns ("stall_" or "Stall")."""
import csv
import re
import sys
from collections import Counter


def num(x):
    try:
        return float(str(x).replace(",", ""))
    except ValueError:
        return 0.0


def main(path, top=40):
    rows = list(csv.reader(open(path, newline="")))
    head_i = next(i for i, r in enumerate(rows) if any("Source" in c for c in r))
    head, body = rows[head_i], [r for r in rows[head_i + 1:] if len(r) == len(rows[head_i])]
    col = lambda *keys: next((i for i, c in enumerate(head) if all(k in c for k in keys)), None)
    src, addr = col("Source"), col("Address")
    allc = col("Warp Stall Sampling", "All") or col("stall", "All")
    reasons = [i for i, c in enumerate(head) if i != allc and re.search(r"(?i)stall", c)
               and "Sampling" not in c]
    print(f"{path}: {len(body)} instructions; columns: all={head[allc] if allc is not None else None}, "
          f"{len(reasons)} reason columns")
    if allc is None:
        print("no all-samples column; header:", head)
        return
    total = sum(num(r[allc]) for r in body)
    ops = Counter()
    for r in body:
        ops[r[src].split()[0] if r[src].split() else "?"] += num(r[allc])
    print(f"total samples {total:.0f}")
    for op, n in ops.most_common(20):
        print(f"  {op:14} {100 * n / total:5.1f}%")
    print(f"top {top} instructions:")
    for r in sorted(body, key=lambda r: -num(r[allc]))[:top]:
        rs = sorted(((num(r[i]), head[i]) for i in reasons), reverse=True)[:3]
        why = ", ".join(f"{h.split('_')[-1] if '_' in h else h} {v:.0f}" for v, h in rs if v)
        print(f"  {r[addr] if addr is not None else '':>8} {100 * num(r[allc]) / total:5.1f}%  "
              f"{r[src][:60]:60} {why}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
