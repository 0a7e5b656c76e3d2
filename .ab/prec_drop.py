"""Copy a precision.yaml results folder without the rows a kernel change made stale, so that
`cuflash run` measures them again on resume: flash's float64 forward at the given head dims, and
with --torch torch's rows at the same points too (its math path then runs in the same call, so
the ratio is a same-run one).
    python .ab/prec_drop.py SRC DST 128 [96 ...] [--torch]"""
import csv, shutil, sys
args = [a for a in sys.argv[1:] if a != "--torch"]
torch = "--torch" in sys.argv[1:]
src, dst, dims = args[0], args[1], set(args[2:])
shutil.copytree(src, dst, dirs_exist_ok=True)
rows = list(csv.DictReader(open(f"{src}/results.csv")))
keep = [r for r in rows if not ((r["method"] == "flash" or torch) and r["dtype"] == "float64"
                                and r["pass"] == "forward" and r["head_dim"] in dims)]
with open(f"{dst}/results.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader(); w.writerows(keep)
print(f"{len(rows)} rows, {len(rows) - len(keep)} dropped")
