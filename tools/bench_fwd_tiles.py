"""Forward (or backward) TFLOP/s of cuflash tiles against torch's cuDNN and FlashAttention-2
backends, in one process on one GPU: FlashAttention's benchmark shapes (batch·T = 16384, heads·d = 2048),
float16/bfloat16, d = 64/128, causal and not. Each round times every method of a cell once
(median of --reps calls between CUDA events), the order rotated round by round; a cell's figure
is the median over rounds, and each ratio the median of the per-round ratios (issue 13's
"forward >= 1.05x cuDNN" reads the cudnn column). --pass bwd times the backward alone from the
forward's residuals (torch: autograd.grad on a kept graph), TFLOP/s by 2.5 times the forward's
FLOPs.

    python tools/bench_fwd_tiles.py --tiles 128x128x8x3,128x128x12x2 [--T 2048,4096,8192,16384]
        [--d 64,128] [--dtypes float16,bfloat16] [--rounds 5] [--pass fwd|bwd] [--json out.json]

A tile is block_m x block_n x num_warps x num_stages of kernel 'wgmma'; 'default' is the library's
own choice; ':atomic' after a tile times the backward with deterministic=False. torch is imported for the comparison only (cuflash never imports it).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_layouts import _time  # noqa: E402


def _tile(text):
    """(TileConfig or None for the default, deterministic): '64x128x12x2', 'default', and with
    ':atomic' after either the backward's deterministic=False (dQ by atomics)."""
    from cuflash import TileConfig
    text, _, mode = text.partition(":")
    if mode not in ("", "atomic"):
        raise SystemExit(f"--tiles: unknown mode {mode!r} (only ':atomic')")
    det = mode != "atomic"
    if text == "default":
        return None, det
    m, n, w, s = (int(x) for x in text.split("x"))
    return TileConfig(m, n, w, s, "wgmma"), det


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiles", default="default")
    ap.add_argument("--T", default="2048,4096,8192,16384")
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--pass", dest="pass_", choices=("fwd", "bwd"), default="fwd")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    import cupy as cp
    import numpy as np
    from ml_dtypes import bfloat16

    import cuflash
    from cuflash.experiments import env as run_env
    where = run_env.collect("gpu")
    print("# " + run_env.summary_line(where), flush=True)   # GPU, versions, date, commit
    methods = {f"cuflash {t}": _tile(t) for t in a.tiles.split(",")}
    torch = None
    if not a.no_torch:
        from cuflash.experiments.measure import Unavailable
        from cuflash.experiments.torch_sdpa import BACKENDS, import_torch
        try:
            torch = import_torch()
            from torch.nn.attention import SDPBackend, sdpa_kernel
            for name in ("cudnn", "flash"):
                methods[name] = getattr(SDPBackend, BACKENDS[name])
        except Unavailable as exc:
            print(f"torch backends left out: {exc}")
    results = []
    names = list(methods)
    print(f"{'dtype':8} {'d':>3} {'causal':6} {'T':>6} " + " ".join(f"{n[:22]:>22}" for n in names)
          + "   ratios to cudnn", flush=True)
    for dt in a.dtypes.split(","):
        npdt = {"float16": np.float16, "bfloat16": bfloat16}[dt]
        for d in (int(x) for x in a.d.split(",")):
            for causal in (bool(int(x)) for x in a.causal.split(",")):
                for T in (int(x) for x in a.T.split(",")):
                    H, B = 2048 // d, max(1, 16384 // T)
                    rng = np.random.default_rng(T + d)
                    q, k, v = (cp.asarray(rng.standard_normal((B, H, T, d)).astype(npdt))
                               for _ in range(3))
                    bwd = a.pass_ == "bwd"
                    flops = 4.0 * B * H * T * T * d * (0.5 if causal else 1.0) * (2.5 if bwd else 1)
                    dout = res = None
                    if bwd:   # the backward from the forward's residuals, against dout
                        dout = cp.asarray(rng.standard_normal((B, H, T, d)).astype(npdt))
                        res = cuflash.attention(q, k, v, causal=causal, return_residuals=True)[1]
                    fns = {}
                    for name, m in methods.items():
                        if name.startswith("cuflash") and bwd:
                            fns[name] = (lambda m=m: cuflash.attention_backward(
                                dout, res, tile=m[0], deterministic=m[1]))
                        elif name.startswith("cuflash"):
                            fns[name] = (lambda m=m: cuflash.attention(q, k, v, causal=causal,
                                                                       tile=m[0]))
                        elif bwd:
                            leaves = tuple(torch.from_dlpack(x).requires_grad_(True)
                                           for x in (q, k, v))
                            with sdpa_kernel(m):
                                tout = torch.nn.functional.scaled_dot_product_attention(
                                    *leaves, is_causal=causal)
                            tdo = torch.from_dlpack(dout)

                            def run(m=m, tout=tout, leaves=leaves, tdo=tdo):
                                with sdpa_kernel(m):
                                    torch.autograd.grad(tout, leaves, tdo, retain_graph=True)
                            fns[name] = run
                        else:
                            tq, tk, tv = (torch.from_dlpack(x) for x in (q, k, v))

                            def run(m=m, tq=tq, tk=tk, tv=tv):
                                with sdpa_kernel(m):
                                    torch.nn.functional.scaled_dot_product_attention(
                                        tq, tk, tv, is_causal=causal)
                            fns[name] = run
                    rates = {n: [] for n in names}
                    for r in range(a.rounds):
                        order = names[r % len(names):] + names[:r % len(names)]
                        for n in order:
                            try:
                                rates[n].append(flops / _time(cp, fns[n], a.reps) / 1e9)
                            except Exception as e:   # a backend that refuses the cell
                                rates[n].append(float("nan"))
                                if r == 0:
                                    print(f"  {n}: {type(e).__name__}: {str(e)[:120]}")
                    med = {n: statistics.median(v) for n, v in rates.items()}
                    ratio = {}
                    if "cudnn" in rates:
                        for n in names:
                            if n.startswith("cuflash"):
                                ratio[n] = statistics.median(
                                    x / y for x, y in zip(rates[n], rates["cudnn"]))
                    results.append(dict(dtype=dt, d=d, causal=causal, T=T, tflops=med,
                                        rounds=rates, ratio_to_cudnn=ratio))
                    print(f"{dt:8} {d:3} {causal!s:6} {T:6} "
                          + " ".join(f"{med[n]:22.1f}" for n in names) + "   "
                          + " ".join(f"{x:.3f}" for x in ratio.values()), flush=True)
                    del q, k, v, dout, res, fns
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(env=where, methods=names, cells=results), f, indent=1)


if __name__ == "__main__":
    import gpu_tool  # noqa: E402  (this folder: the script's own)
    sys.exit(gpu_tool.run(main))
