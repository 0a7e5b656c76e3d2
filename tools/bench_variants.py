"""Issue 11's two speed targets, measured quickly on one GPU (experiments/variants.yaml is the
full sweep): a sliding window of 4096 keys at T = 32768 against dense causal attention, TFLOP/s
of visible scores only (target >= 0.9), and the forward time of softcap and ALiBi over plain
attention at d = 128 (target <= 1.10), float16.

Each timing is the median of 10 calls between CUDA events. A ratio is the median over --rounds
rounds of the ratio within a round: a round times the reference (dense causal, or plain
attention) and every configuration once, in an order rotated by one each round, so that the
GPU's clock drift, which moved single ratios by up to 15% between calls (NOTES v17), falls on
both sides of each ratio alike. The min and max over rounds are printed beside the median.

    python tools/bench_variants.py [--parts window,modifiers] [--backward] [--rounds 3]
                                   [--window-tiles 64x64x8x2,64x128x8x2]

--window-tiles also times the window's forward with each of these wgmma tiles
(block_m x block_n x num_warps x num_stages), against the same dense causal reference: a block of
the window runs ~33 key tiles where a dense causal block averages 128, so its fixed cost per
block (NOTES v15: ~6 us of set-up and tail at one block per SM) weighs four times as much, and a
smaller tile that lets two blocks share an SM may hide it.

--backward also times the backward of each score modifier against plain attention's
(informative, issue 11's target is the forward's).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_layouts import _time  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="window,modifiers")
    ap.add_argument("--backward", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window-tiles", default="",
                    help="extra forward tiles for the window, e.g. 64x64x8x2 (kernel 'wgmma')")
    a = ap.parse_args(argv)
    parts = a.parts.split(",")
    unknown = set(parts) - {"window", "modifiers"}
    if unknown:
        ap.error(f"--parts: unknown {sorted(unknown)} (window, modifiers)")
    if a.rounds < 1:
        ap.error(f"--rounds={a.rounds}: at least 1")
    try:
        tiles = [window_tile(t) for t in a.window_tiles.split(",") if t]
    except ValueError as e:
        ap.error(f"--window-tiles: {e}")
    import cupy as cp
    import numpy as np

    import cuflash
    from cuflash.mask import Mask
    rng = np.random.default_rng(0)
    rand = lambda *s: cp.asarray(rng.standard_normal(s).astype(np.float16))
    if "window" in parts:
        window_vs_causal(cp, cuflash, Mask, rand, a.rounds, tiles)
    if "modifiers" in parts:
        modifiers(cp, cuflash, np, rand, a.backward, a.rounds)


def window_tile(text: str):
    """'64x64x8x2' -> TileConfig(64, 64, 8, 2, 'wgmma') (checked by TileConfig itself)."""
    from cuflash import TileConfig
    parts = text.split("x")
    if len(parts) != 4 or not all(p.isdigit() for p in parts):
        raise ValueError(f"{text!r} is not block_m x block_n x num_warps x num_stages")
    return TileConfig(*(int(p) for p in parts), "wgmma")


def rounds_of(cp, fns: dict, rounds: int) -> dict:
    """name -> list of per-round times (ms) of each fn, the order rotated by one each round."""
    names = list(fns)
    times = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            times[n].append(_time(cp, fns[n]))
    return times


def ratio(num: list, den: list) -> str:
    """'median (min-max)' of the per-round ratios num[r] / den[r]."""
    rs = [a / b for a, b in zip(num, den)]
    return f"{statistics.median(rs):.3f} ({min(rs):.3f}-{max(rs):.3f})"


def window_vs_causal(cp, cuflash, Mask, rand, rounds, tiles=()):
    d, T, H = 128, 32768, 16
    q, k, v, do = (rand(1, H, T, d) for _ in range(4))
    print(f"window vs causal, T={T}, d={d}, H={H}, float16 (visible TFLOP/s; ratios of "
          f"TFLOP/s, median of {rounds} rounds)")
    cases = {"causal": None, "window 4096": (4095, 0)}
    flops, fns = {}, {}
    for name, window in cases.items():
        vis = Mask.make(causal=True, window=window).visible_pairs(T, T)
        flops[name] = 4.0 * H * vis * d
        res = cuflash.attention(q, k, v, causal=True, window=window, return_residuals=True)[1]
        fns[name + " fwd"] = lambda w=window: cuflash.attention(q, k, v, causal=True, window=w)
        fns[name + " bwd"] = lambda r=res: cuflash.attention_backward(do, r)
    for tile in tiles:
        fns[f"window {tile.short()} fwd"] = lambda t=tile: cuflash.attention(
            q, k, v, causal=True, window=cases["window 4096"], tile=t)
    t = rounds_of(cp, fns, rounds)
    for name in cases:
        f = flops[name] / statistics.median(t[name + " fwd"]) / 1e9
        b = 2.5 * flops[name] / statistics.median(t[name + " bwd"]) / 1e9
        print(f"  {name:12} fwd {f:7.1f}  bwd {b:7.1f}")
    # visible-TFLOP/s ratio = (flops_w / t_w) / (flops_c / t_c)
    scale = flops["window 4096"] / flops["causal"]
    for p in ("fwd", "bwd"):
        rs = [scale * c / w for w, c in zip(t[f"window 4096 {p}"], t[f"causal {p}"])]
        print(f"  ratio {p}    {statistics.median(rs):.3f} ({min(rs):.3f}-{max(rs):.3f})"
              "  (target >= 0.9)")
    for tile in tiles:
        rs = [scale * c / w for w, c in zip(t[f"window {tile.short()} fwd"], t["causal fwd"])]
        print(f"  ratio fwd, window on {tile.short()}: {statistics.median(rs):.3f} "
              f"({min(rs):.3f}-{max(rs):.3f})")


def modifiers(cp, cuflash, np, rand, backward, rounds):
    d, T, B, H = 128, 8192, 2, 16
    q, k, v, do = (rand(B, H, T, d) for _ in range(4))
    slopes = cp.asarray((2.0 ** (-8.0 * np.arange(1, H + 1) / H)).astype(np.float32))
    print(f"score modifiers, time / plain, T={T}, B={B}, d={d}, median of {rounds} rounds "
          "(target: forward <= 1.10)")
    kinds = {"plain": {}, "softcap 30": dict(softcap=30.0), "alibi": dict(alibi_slopes=slopes),
             "both": dict(softcap=30.0, alibi_slopes=slopes)}
    for causal in (False, True):
        fns = {}
        for name, kw in kinds.items():
            fns[name + " fwd"] = lambda kw=kw: cuflash.attention(q, k, v, causal=causal, **kw)
            if backward:
                res = cuflash.attention(q, k, v, causal=causal, return_residuals=True, **kw)[1]
                fns[name + " bwd"] = lambda r=res: cuflash.attention_backward(do, r)
        t = rounds_of(cp, fns, rounds)
        # the times themselves: a ratio that moved says not which side did (v83: plain sped up)
        print(f"  causal={causal!s:5} median ms: " + "  ".join(
            f"{n} {statistics.median(ts):.3f}" for n, ts in t.items()))
        for name in list(kinds)[1:]:
            bwd = (f"  backward {ratio(t[name + ' bwd'], t['plain bwd'])}" if backward else "")
            print(f"  causal={causal!s:5} {name:11} forward "
                  f"{ratio(t[name + ' fwd'], t['plain fwd'])}{bwd}")


if __name__ == "__main__":
    import gpu_tool  # noqa: E402  (this folder: the script's own)
    sys.exit(gpu_tool.run(main))
