"""Side-by-side speed of two cuflash trees on one GPU, in one run: FlashAttention's benchmark
shapes (batch·T = 16384, heads·d = 2048), forward and backward, float16/bfloat16, d = 64/128,
causal and not, the default tiles of each tree (--dtypes may name float32 and a float32
precision: float32:ieee). Each tree runs in its own process (its own
import of cuflash); the rounds alternate A, B, A, B so that drift of the GPU's clocks hits both,
and each cell keeps its best round. TFLOP/s by 4·B·H·T²·d forward (halved when causal), ×2.5
backward.

    python tools/ab_speed.py --base .ab/base --new . [--T 2048,4096,8192,16384] [--rounds 2]
        [--bwd-tile 64x128x12x2:atomic | 64x64x4x1:mma]

prints a table (new / base per cell, then min / median / max) and writes --json if given.
--bwd-tile times both trees' backward with that wgmma tile ('default': each tree's own) and,
with ':atomic', deterministic=False (dQ by atomics), as tools/bench_fwd_tiles.py's --tiles.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

#: This checkout's timer (cuflash/experiments/gputime.py), used for both trees' calls
GPUTIME = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "cuflash",
                       "experiments", "gputime.py")

CELL_CODE = r"""
import importlib.util, json, sys, numpy as np, cupy as cp
sys.path.insert(0, sys.argv[1])
import cuflash
_spec = importlib.util.spec_from_file_location("gputime", sys.argv[3])
gputime = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(gputime)
from ml_dtypes import bfloat16
out = {}
for spec in json.loads(sys.argv[2]):
    T, d, dt, causal, pass_ = spec
    H = 2048 // d; B = max(1, 16384 // T)
    dt, _, prec = dt.partition(":")         # "float32:ieee": a float32 precision mode
    kw = dict(causal=causal, **({"precision": prec} if prec else {}))
    dtype = {"float16": np.float16, "bfloat16": bfloat16, "float32": np.float32,
             "float64": np.float64}[dt]
    rng = np.random.default_rng(0)
    q, k, v, do = (cp.asarray(rng.standard_normal((B, H, T, d)).astype(dtype)) for _ in range(4))
    bwd_kw = json.loads(sys.argv[4])
    if bwd_kw.get("tile"):
        bwd_kw["tile"] = cuflash.TileConfig(*bwd_kw["tile"])
    if hasattr(cuflash, "Residuals"):   # the backward takes the forward's residuals
        o, lse = cuflash.attention(q, k, v, return_residuals=True, **kw)
        if prec:   # the cell's precision for the backward too (its default is 'highest')
            bwd_kw.setdefault("precision", prec)
        bwd = lambda: cuflash.attention_backward(do, lse, **bwd_kw)
    else:                               # trees before 2026-12-01: arrays and settings again
        o, lse = cuflash.attention(q, k, v, causal=causal, return_lse=True)
        bwd = lambda: cuflash.attention_backward(do, q, k, v, o, lse, causal=causal)
    fn = (lambda: cuflash.attention(q, k, v, **kw)) if pass_ == "fwd" else bwd
    ms = float(np.median(gputime.gpu_times(fn, 10, 3)))
    flops = 4.0 * B * H * T * T * d * (0.5 if causal else 1.0) * (2.5 if pass_ == "bwd" else 1.0)
    out[json.dumps(spec)] = flops / ms / 1e9
    del q, k, v, do, o, lse
print("RESULT " + json.dumps(out))
"""


def bwd_options(text: str) -> dict:
    """attention_backward's keyword arguments of a --bwd-tile: '64x128x12x2' (a wgmma tile) or
    'default', then ':mma' for the tile of that kernel family and ':atomic' for
    deterministic=False ({} for 'default' alone)."""
    text, *modes = text.split(":")
    if any(m not in ("atomic", "mma") for m in modes) or len(set(modes)) < len(modes):
        raise SystemExit(f"--bwd-tile: unknown modes {modes!r} (':mma', ':atomic')")
    out = {"deterministic": False} if "atomic" in modes else {}
    if text != "default":
        try:
            m, n, w, st = (int(x) for x in text.split("x"))
        except ValueError:
            raise SystemExit(f"--bwd-tile: {text!r} is not block_m x block_n x warps x stages, "
                             f"e.g. 64x128x12x2") from None
        out["tile"] = [m, n, w, st, "mma" if "mma" in modes else "wgmma"]
    elif "mma" in modes:
        raise SystemExit("--bwd-tile: ':mma' names a tile's kernel family; give the tile")
    return out


def run_tree(tree, cells, bwd_kw=None):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    r = subprocess.run([sys.executable, "-c", CELL_CODE, os.path.abspath(tree), json.dumps(cells),
                        GPUTIME, json.dumps(bwd_kw or {})],
                       capture_output=True, text=True, env=env, timeout=900)
    line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    if r.returncode or not line:
        raise RuntimeError(f"{tree}: rc={r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return {tuple(json.loads(k)): v for k, v in json.loads(line[0][7:]).items()}


ENV_CODE = ("import sys; sys.path.insert(0, sys.argv[1]); from cuflash.experiments import env; "
            "print('ENV ' + env.summary_line(env.collect('gpu')))")


def env_line(tree) -> str:
    """Where the A/B ran, as bench_f32's header says it (GPU, driver, CUDA runtime, CuPy,
    torch, date and the tree's commit: cuflash.experiments.env.summary_line), from a process of
    its own on ``tree`` (the timing processes' device untouched); a line saying why if it cannot."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    r = subprocess.run([sys.executable, "-c", ENV_CODE, os.path.abspath(tree)],
                       capture_output=True, text=True, env=env, timeout=120)
    line = [x[4:] for x in r.stdout.splitlines() if x.startswith("ENV ")]
    return line[0] if line else f"(no environment line: rc={r.returncode} {r.stderr[-300:]!r})"


def cell_parser(doc, T="2048,4096,8192,16384", dtypes="float16,bfloat16", causal="0,1"):
    """The arguments that choose two trees and the cells to time (tools/ab_kernels.py too)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--T", default=T)
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--dtypes", default=dtypes)
    ap.add_argument("--passes", default="fwd,bwd")
    ap.add_argument("--causal", default=causal, help="0, 1 or 0,1")
    return ap


def cells_of(a) -> list:
    """[T, d, dtype, causal, pass] of every cell the parsed arguments choose."""
    return [[T, d, dt, bool(int(c)), p] for p in a.passes.split(",")
            for d in map(int, a.d.split(",")) for dt in a.dtypes.split(",")
            for c in a.causal.split(",") for T in map(int, a.T.split(","))]


def main(argv=None):
    ap = cell_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--bwd-tile", default="default")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    cells = cells_of(a)
    bwd_kw = bwd_options(a.bwd_tile)
    where = env_line(a.new)
    print("# " + where, flush=True)
    best = {"base": {}, "new": {}}
    for r in range(a.rounds):
        for name, tree in (("base", a.base), ("new", a.new)):
            for cell, tf in run_tree(tree, cells, bwd_kw).items():
                best[name][cell] = max(tf, best[name].get(cell, 0.0))
            print(f"round {r + 1}: {name} done", flush=True)
        report(cells, best, a.passes.split(","))   # after every round: a time-out keeps the table
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"env": where, "cells": cells, "base": {json.dumps(k): v for k, v in best["base"].items()},
                       "new": {json.dumps(k): v for k, v in best["new"].items()}}, f, indent=1)


def report(cells, best, passes):
    ratios = []
    print(f"{'pass':4} {'d':>4} {'dtype':9} {'causal':6} {'T':>6} {'base':>7} {'new':>7} {'new/base':>8}")
    for cell in map(tuple, cells):
        b, n = best["base"][cell], best["new"][cell]
        ratios.append(n / b)
        T, d, dt, c, p = cell
        print(f"{p:4} {d:4} {dt:9} {str(c):6} {T:6} {b:7.1f} {n:7.1f} {n / b:8.3f}")
    for p in passes:
        rs = [n for cell, n in zip(cells, ratios) if cell[4] == p]
        print(f"{p}: new/base min {min(rs):.3f} median {statistics.median(rs):.3f} max {max(rs):.3f}",
              flush=True)


if __name__ == "__main__":
    import gpu_tool  # noqa: E402  (this folder: the script's own)
    sys.exit(gpu_tool.run(main))
