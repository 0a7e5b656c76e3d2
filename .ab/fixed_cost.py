"""The fixed cost of a forward block (NOTES v15): dense non-causal, T = 32768 queries, H = 33
(8448 blocks of 128 queries: 64 waves of 132), S = 128 … 4096 keys (1 … 32 key tiles per block),
d = 128, float16. Prints ms and µs per block-slot (ms / 64); the slope over S is the tile's time,
the intercept the block's fixed cost. --once: one call per S (for ncu)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from bench_layouts import _time  # noqa: E402  (3 warm-up calls, median of 10 between CUDA events)

import cupy as cp
import numpy as np

import cuflash

d, T, H = 128, 32768, 33
rng = np.random.default_rng(0)
q = cp.asarray(rng.standard_normal((1, H, T, d)).astype(np.float16))
for S in (128, 256, 512, 1024, 2048, 4096):
    k, v = (cp.asarray(rng.standard_normal((1, H, S, d)).astype(np.float16)) for _ in range(2))
    fn = lambda: cuflash.attention(q, k, v)
    fn()
    cp.cuda.Device().synchronize()
    if "--once" in sys.argv:
        fn()
        cp.cuda.Device().synchronize()
        continue
    ms = _time(cp, fn)
    print(f"S={S:5} tiles/block={S // 128:3} {ms:8.3f} ms  {ms / 64 * 1000:7.1f} us per block-slot  "
          f"{4.0 * H * T * S * d / ms / 1e9:6.1f} TFLOP/s", flush=True)
