"""Where a side-by-side speed difference comes from: the GPU time of each kernel (Nsight Compute's
gpu__time_duration, clocks as ncu sets them) and the host time of a call, for two cuflash trees
on one GPU in one run. tools/ab_speed.py times whole calls between CUDA events, host work
included; this splits the two.

    python tools/ab_kernels.py --base .ab/base --new . [--T 8192] [--d 64,128] [--passes fwd,bwd]

prints, per tree and cell, each kernel's median duration (µs) and the host µs per call of a tiny
problem (the mean of 2000 calls without synchronisation, then of 300 synchronised ones).
"""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab_speed import cell_parser, cells_of  # noqa: E402

CELL_CODE = r"""
import json, sys, time, numpy as np, cupy as cp
sys.path.insert(0, sys.argv[1])
import cuflash
from ml_dtypes import bfloat16
mode = sys.argv[3]
for spec in json.loads(sys.argv[2]):
    T, d, dt, causal, pass_ = spec
    H = 2048 // d if mode == "kernels" else 1
    B = max(1, 16384 // T) if mode == "kernels" else 1
    if mode == "host":
        T = 128
    dtype = {"float16": np.float16, "bfloat16": bfloat16}[dt]
    rng = np.random.default_rng(0)
    q, k, v, do = (cp.asarray(rng.standard_normal((B, H, T, d)).astype(dtype)) for _ in range(4))
    if hasattr(cuflash, "Residuals"):
        o, lse = cuflash.attention(q, k, v, causal=causal, return_residuals=True)
        bwd = lambda: cuflash.attention_backward(do, lse)
    else:
        o, lse = cuflash.attention(q, k, v, causal=causal, return_lse=True)
        bwd = lambda: cuflash.attention_backward(do, q, k, v, o, lse, causal=causal)
    fn = (lambda: cuflash.attention(q, k, v, causal=causal)) if pass_ == "fwd" else bwd
    for _ in range(3):
        fn()
    cp.cuda.Device().synchronize()
    if mode == "kernels":
        for _ in range(5):
            fn()
        cp.cuda.Device().synchronize()
        continue
    t0 = time.perf_counter()
    for _ in range(2000):
        fn()
    cp.cuda.Device().synchronize()
    async_us = (time.perf_counter() - t0) / 2000 * 1e6
    t0 = time.perf_counter()
    for _ in range(300):
        fn(); cp.cuda.Device().synchronize()
    sync_us = (time.perf_counter() - t0) / 300 * 1e6
    print("HOST " + json.dumps([spec, async_us, sync_us]), flush=True)
"""


def kernel_times(tree, cells, ncu, sections=()):
    """{(cell index, kernel name): [durations in µs]} from one ncu run per cell, and
    {(cell index, kernel name, metric): [values]} of every metric of the extra ncu sections."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    times, extra = {}, {}
    extra_args = [x for sec in sections for x in ("--section", sec)]
    for n, cell in enumerate(cells):
        r = subprocess.run([ncu, "--csv", "--metrics", "gpu__time_duration.sum", *extra_args,
                            "-k", "regex:cuflash",
                            sys.executable, "-c", CELL_CODE, os.path.abspath(tree),
                            json.dumps([cell]), "kernels"],
                           capture_output=True, text=True, env=env, timeout=600)
        text = r.stdout[r.stdout.find('"ID"'):]
        if r.returncode or not text:
            raise RuntimeError(f"{tree}: ncu rc={r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
        for row in csv.DictReader(io.StringIO(text)):
            if row.get("Metric Name") != "gpu__time_duration.sum" or row.get("Section Name", "") \
                    not in ("", "Command line profiler metrics"):
                try:
                    value = float(row["Metric Value"].replace(",", ""))
                except ValueError:
                    continue
                name = row["Kernel Name"].split("(")[0].split("<")[0]
                key = f'{row.get("Section Name", "")}: {row["Metric Name"]} [{row.get("Metric Unit", "")}]'
                extra.setdefault((n, name, key), []).append(value)
                continue
            value = float(row["Metric Value"].replace(",", ""))
            unit = row.get("Metric Unit", "nsecond")
            us = value / 1e3 if unit.startswith("n") else value * 1e3 if unit.startswith("m") else value
            name = row["Kernel Name"].split("(")[0].split("<")[0]
            times.setdefault((n, name), []).append(us)
    return times, extra


def host_times(tree, cells):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    r = subprocess.run([sys.executable, "-c", CELL_CODE, os.path.abspath(tree), json.dumps(cells),
                        "host"], capture_output=True, text=True, env=env, timeout=600)
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("HOST "):
            spec, a, s = json.loads(line[5:])
            out[tuple(spec)] = (a, s)
    if r.returncode:
        raise RuntimeError(f"{tree}: rc={r.returncode}\n{r.stderr[-3000:]}")
    return out


def main(argv=None):
    ap = cell_parser(__doc__, T="8192", dtypes="float16")
    ap.add_argument("--ncu", default=shutil.which("ncu") or "ncu")
    ap.add_argument("--sections", default="", help="extra ncu sections, comma-separated "
                    "(e.g. WarpStateStats,Occupancy,LaunchStats): every metric, base and new")
    ap.add_argument("--no-host", action="store_true", help="skip the host timing")
    a = ap.parse_args(argv)
    cells = cells_of(a)
    trees = {"base": a.base, "new": a.new}
    sections = tuple(m for m in a.sections.split(",") if m)
    host = {} if a.no_host else {name: host_times(tree, cells) for name, tree in trees.items()}
    print(f"{'cell':34} {'host async µs base/new':>24} {'host sync µs base/new':>24}")
    for cell in map(tuple, cells) if host else ():
        hb, hn = host["base"].get(cell, (0, 0)), host["new"].get(cell, (0, 0))
        print(f"{str(cell):34} {hb[0]:11.1f} {hn[0]:11.1f}  {hb[1]:11.1f} {hn[1]:11.1f}", flush=True)
    runs = {name: kernel_times(tree, cells, a.ncu, sections) for name, tree in trees.items()}
    kern = {name: r[0] for name, r in runs.items()}
    print(f"{'cell':34} {'kernel (base | new)':60} {'µs base':>9} {'µs new':>9} {'new/base':>8}")
    for n, cell in enumerate(cells):
        rows = {name: sorted((k[1], statistics.median(v)) for k, v in kern[name].items() if k[0] == n)
                for name in trees}
        for (kb, tb), (kn, tn) in zip(rows["base"], rows["new"]):
            print(f"{str(cell):34} {kb[:29]:29}|{kn[:29]:29} {tb:9.1f} {tn:9.1f} {tn / tb:8.3f}",
                  flush=True)
            keys = sorted({k[2] for k in runs["base"][1] if k[:2] == (n, kb)})
            for m in keys:
                vb = statistics.median(runs["base"][1][(n, kb, m)])
                vn = statistics.median(runs["new"][1].get((n, kn, m), [float("nan")]))
                print(f"    {m[:78]:78} {vb:12.4g} {vn:12.4g} {vn / vb if vb else float('nan'):7.3f}")


if __name__ == "__main__":
    import gpu_tool  # noqa: E402  (this folder: the script's own)
    sys.exit(gpu_tool.run(main))
