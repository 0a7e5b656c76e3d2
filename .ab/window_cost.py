"""The sliding window's cost per block against the dense kernel's (NOTES v15: dense non-causal
blocks cost ~6 us + 2.4 us per key tile): causal windows (L, 0) at T = S = 32768, H = 33 (8448
blocks, 64 waves of 132), each block 1 + (L + 1) / 128 key tiles, two of them cut by the mask;
then dense and window kernels on the same unmasked work (S = 4096 non-causal, and a window
wider than S). Prints ms and us per block-slot (ms / 64)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from bench_layouts import _time  # noqa: E402  (3 warm-up calls, median of 10 between CUDA events)

import cupy as cp
import numpy as np

import cuflash

d, T, H = 128, 32768, 33
rng = np.random.default_rng(0)
q, k, v = (cp.asarray(rng.standard_normal((1, H, T, d)).astype(np.float16)) for _ in range(3))
for L in (127, 255, 511, 1023, 2047, 4095):
    ms = _time(cp, lambda: cuflash.attention(q, k, v, causal=True, window=(L, 0)))
    print(f"causal window ({L:4}, 0): tiles/block={1 + (L + 1) // 128:3} {ms:8.3f} ms "
          f"{ms / 64 * 1000:7.1f} us per block-slot", flush=True)
k4, v4 = k[:, :, :4096].copy(), v[:, :, :4096].copy()
for name, kw in (("dense S=4096", {}), ("window (1e6, 1e6) S=4096", dict(window=(10**6, 10**6)))):
    ms = _time(cp, lambda: cuflash.attention(q, k4, v4, **kw))
    print(f"{name:28} tiles/block= 32 {ms:8.3f} ms {ms / 64 * 1000:7.1f} us per block-slot", flush=True)
