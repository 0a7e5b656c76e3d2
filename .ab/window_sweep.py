"""Sliding-window forward at T = 32768, d = 128, float16: visible TFLOP/s against the window's width
(the fixed cost of a block spread over window / 128 key tiles) and against the head count (H = 16:
4096 blocks, 31.03 waves of 132; H = 33: 8448 blocks, 64 waves exactly)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from bench_layouts import _time  # noqa: E402  (3 warm-up calls, median of 10 between CUDA events)

import cupy as cp
import numpy as np

import cuflash
from cuflash.mask import Mask

d, T = 128, 32768
rng = np.random.default_rng(0)

for H in (16, 33):
    q, k, v = (cp.asarray(rng.standard_normal((1, H, T, d)).astype(np.float16)) for _ in range(3))
    for w in (None, (1023, 0), (2047, 0), (4095, 0), (8191, 0)):
        ms = _time(cp, lambda: cuflash.attention(q, k, v, causal=True, window=w))
        vis = Mask.make(causal=True, window=w).visible_pairs(T, T)
        print(f"H={H:3} window={str(w):12} {ms:8.3f} ms {4.0 * H * vis * d / ms / 1e9:7.1f} visible TFLOP/s",
              flush=True)
    del q, k, v
    cp.get_default_memory_pool().free_all_blocks()
