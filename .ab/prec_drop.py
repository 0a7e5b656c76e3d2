"""Copy a precision.yaml results folder without the rows a tile change made stale, so that
`cuflash run` measures them again on resume: flash's float64 forward at the given head dims.
    python .ab/prec_drop.py SRC DST 128 [96 ...]"""
import csv, shutil, sys
src, dst, dims = sys.argv[1], sys.argv[2], set(sys.argv[3:])
shutil.copytree(src, dst, dirs_exist_ok=True)
rows = list(csv.DictReader(open(f"{src}/results.csv")))
keep = [r for r in rows if not (r["method"] == "flash" and r["dtype"] == "float64"
                                and r["pass"] == "forward" and r["head_dim"] in dims)]
with open(f"{dst}/results.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader(); w.writerows(keep)
print(f"{len(rows)} rows, {len(rows) - len(keep)} dropped")
