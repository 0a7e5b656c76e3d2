"""Issue 11's two speed targets, measured quickly on one GPU (experiments/variants.yaml is the
full sweep): a sliding window of 4096 keys at T = 32768 against dense causal attention, TFLOP/s
of visible scores only (target >= 0.9), and the forward time of softcap and ALiBi over plain
attention at d = 128 (target <= 1.10), float16, median of 10 timed calls between CUDA events.

    python tools/bench_variants.py [--parts window,modifiers] [--backward]

--backward also times the backward of each score modifier against plain attention's (from the
same residuals' shapes; informative, issue 11's target is the forward's).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_layouts import _time  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="window,modifiers")
    ap.add_argument("--backward", action="store_true")
    a = ap.parse_args(argv)
    parts = a.parts.split(",")
    unknown = set(parts) - {"window", "modifiers"}
    if unknown:
        ap.error(f"--parts: unknown {sorted(unknown)} (window, modifiers)")
    import cupy as cp
    import numpy as np

    import cuflash
    from cuflash.mask import Mask
    rng = np.random.default_rng(0)
    rand = lambda *s: cp.asarray(rng.standard_normal(s).astype(np.float16))
    if "window" in parts:
        window_vs_causal(cp, cuflash, Mask, rand)
    if "modifiers" in parts:
        modifiers(cp, cuflash, np, rand, a.backward)


def window_vs_causal(cp, cuflash, Mask, rand):
    d, T, H = 128, 32768, 16
    q, k, v, do = (rand(1, H, T, d) for _ in range(4))
    print(f"window vs causal, T={T}, d={d}, H={H}, float16 (visible TFLOP/s)")
    rates = {}
    for name, window in (("causal", None), ("window 4096", (4095, 0))):
        vis = Mask.make(causal=True, window=window).visible_pairs(T, T)
        flops = 4.0 * H * vis * d
        out, res = cuflash.attention(q, k, v, causal=True, window=window, return_residuals=True)
        f = flops / _time(cp, lambda: cuflash.attention(q, k, v, causal=True, window=window)) / 1e9
        b = 2.5 * flops / _time(cp, lambda: cuflash.attention_backward(do, res)) / 1e9
        rates[name] = (f, b)
        print(f"  {name:12} fwd {f:7.1f}  bwd {b:7.1f}")
    print(f"  ratio        fwd {rates['window 4096'][0] / rates['causal'][0]:.3f}  "
          f"bwd {rates['window 4096'][1] / rates['causal'][1]:.3f}  (target >= 0.9)")


def modifiers(cp, cuflash, np, rand, backward):
    d, T, B, H = 128, 8192, 2, 16
    q, k, v, do = (rand(B, H, T, d) for _ in range(4))
    slopes = cp.asarray((2.0 ** (-8.0 * np.arange(1, H + 1) / H)).astype(np.float32))
    print(f"score modifiers, time / plain, T={T}, B={B}, d={d} (target: forward <= 1.10)")

    def fwd_bwd(causal, **kw):
        f = _time(cp, lambda: cuflash.attention(q, k, v, causal=causal, **kw))
        if not backward:
            return f, None
        res = cuflash.attention(q, k, v, causal=causal, return_residuals=True, **kw)[1]
        return f, _time(cp, lambda: cuflash.attention_backward(do, res))

    for causal in (False, True):
        base = fwd_bwd(causal)
        for name, kw in (("softcap 30", dict(softcap=30.0)), ("alibi", dict(alibi_slopes=slopes)),
                         ("both", dict(softcap=30.0, alibi_slopes=slopes))):
            t = fwd_bwd(causal, **kw)
            bwd = f"  backward {t[1] / base[1]:.3f}" if backward else ""
            print(f"  causal={causal!s:5} {name:11} forward {t[0] / base[0]:.3f}{bwd}")


if __name__ == "__main__":
    main()
