"""A quick look at issue 12's layouts on one GPU: GQA read in place against K/V materialised per
query head and against torch's SDPA with enable_gqa (when torch is installed), a (B, T, H, d)
array's transposed view against a contiguous copy, and a packed batch of mixed lengths against
the same batch padded to the longest. Forward and backward TFLOP/s (visible scores only),
median of 10 timed calls between CUDA events, the host ahead (cuflash.experiments.gputime).

    python tools/bench_layouts.py [--T 4096] [--d 128]
"""
from __future__ import annotations

import sys

import argparse
import statistics


def _time(cp, fn, reps=10):
    """Median ms per call of `reps` timings with the host ahead (cuflash.experiments.gputime;
    `cp` is unused, kept for the callers)."""
    from cuflash.experiments import gputime
    return statistics.median(gputime.gpu_times(fn, reps, 3))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--T", type=int, default=4096)
    ap.add_argument("--d", type=int, default=128)
    a = ap.parse_args(argv)
    import cupy as cp
    import numpy as np

    import cuflash
    T, d, B, Hq = a.T, a.d, 2, 32
    rng = np.random.default_rng(0)
    rand = lambda *s: cp.asarray(rng.standard_normal(s).astype(np.float16))
    rows = []

    def report(name, flops, fwd, bwd=None):
        tf = flops / _time(cp, fwd) / 1e9
        tb = 2.5 * flops / _time(cp, bwd) / 1e9 if bwd else float("nan")
        rows.append((name, tf, tb))
        print(f"{name:44} fwd {tf:7.1f}  bwd {tb:7.1f} TFLOP/s", flush=True)

    flops = 4.0 * B * Hq * T * T * d * 0.5   # causal
    q, do = rand(B, Hq, T, d), rand(B, Hq, T, d)
    for G in (1, 4, 8):
        k, v = rand(B, Hq // G, T, d), rand(B, Hq // G, T, d)
        out, res = cuflash.attention(q, k, v, causal=True, return_residuals=True)
        report(f"GQA G={G} in place", flops, lambda: cuflash.attention(q, k, v, causal=True),
               lambda: cuflash.attention_backward(do, res))
        if G > 1:
            kr, vr = cp.repeat(k, G, axis=1), cp.repeat(v, G, axis=1)
            report(f"GQA G={G} K/V materialised", flops,
                   lambda: cuflash.attention(q, kr, vr, causal=True))
        try:
            import torch
            import torch.nn.functional as F
            tq, tk, tv = (torch.as_tensor(x, device="cuda") for x in (q, k, v))
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
                report(f"GQA G={G} torch cuDNN enable_gqa", flops, lambda: F.scaled_dot_product_attention(
                    tq, tk, tv, is_causal=True, enable_gqa=G > 1))
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
                report(f"GQA G={G} torch flash enable_gqa", flops, lambda: F.scaled_dot_product_attention(
                    tq, tk, tv, is_causal=True, enable_gqa=G > 1))
        except Exception as exc:   # noqa: BLE001 - torch is a reference only
            print(f"torch reference skipped: {type(exc).__name__}: {exc}")
    # (B, T, H, d) layout
    x = [rand(B, T, Hq, d) for _ in range(3)]
    views = [t.transpose(0, 2, 1, 3) for t in x]
    out, res = cuflash.attention(*views, causal=True, return_residuals=True)
    report("(B,T,H,d) transposed view", flops, lambda: cuflash.attention(*views, causal=True),
           lambda: cuflash.attention_backward(do, res))
    report("(B,T,H,d) copied first", flops, lambda: cuflash.attention(
        *(cp.ascontiguousarray(t) for t in views), causal=True))
    # packed vs padded
    lens = np.array([T // 8, T // 4, T // 2, T, T // 16, 3 * T // 4, T // 3, T // 5])
    cu = cp.asarray(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32))
    total = int(lens.sum())
    qp, kp, vp, dop = (rand(total, Hq, d) for _ in range(4))
    vis = float(sum(4.0 * Hq * n * n * d * 0.5 for n in lens))
    out, res = cuflash.attention_varlen(qp, kp, vp, cu, cu, causal=True, return_residuals=True)
    report("varlen packed (8 mixed lengths)", vis,
           lambda: cuflash.attention_varlen(qp, kp, vp, cu, cu, causal=True),
           lambda: cuflash.attention_varlen_backward(dop, res))
    from cuflash import checks
    from cuflash.api import _default
    from cuflash.gpu import ops
    vpp = checks.check_varlen(qp, kp, vp, cu, cu, causal=True, scale=None)
    tile = _default(vpp)
    report(f"varlen packed, checks done once ({tile.short()})", vis,
           lambda: ops.forward_packed(qp, kp, vp, vpp, tile=tile))
    Bp = len(lens)
    qd, kd, vd = (rand(Bp, Hq, T, d) for _ in range(3))
    report("same batch padded to the longest (useful FLOPs)", vis,
           lambda: cuflash.attention(qd, kd, vd, causal=True))


if __name__ == "__main__":
    import gpu_tool  # noqa: E402  (this folder: the script's own)
    sys.exit(gpu_tool.run(main))
