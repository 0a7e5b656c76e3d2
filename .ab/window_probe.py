"""Where the sliding window's forward loses against dense causal (issue 11: >= 0.9 of dense causal
visible TFLOP/s at T = 32768, window 4096): whole calls and, under ncu, each launched kernel.
    python .ab/window_probe.py [--once]    (--once: one call of each, for ncu)"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from bench_layouts import _time  # noqa: E402  (3 warm-up calls, median of 10 between CUDA events)

import cupy as cp
import numpy as np

import cuflash
from cuflash.mask import Mask

d, T, H = 128, 32768, 16
rng = np.random.default_rng(0)
q, k, v = (cp.asarray(rng.standard_normal((1, H, T, d)).astype(np.float16)) for _ in range(3))
cases = {"causal": None, "window4096": (4095, 0), "window4096_nc": (4095, 4095)}
for name, w in cases.items():
    causal = name != "window4096_nc"
    fn = lambda: cuflash.attention(q, k, v, causal=causal, window=w)
    fn()
    cp.cuda.Device().synchronize()
    if "--once" in sys.argv:
        cp.cuda.nvtx.RangePush(name) if hasattr(cp.cuda, "nvtx") else None
        fn()
        cp.cuda.Device().synchronize()
        continue
    ms = _time(cp, fn)
    vis = Mask.make(causal=causal, window=w).visible_pairs(T, T)
    print(f"{name:14} {ms:8.3f} ms  {4.0 * H * vis * d / ms / 1e9:7.1f} visible TFLOP/s")
