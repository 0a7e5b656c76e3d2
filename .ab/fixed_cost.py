"""The fixed cost of a forward block (NOTES v15): dense non-causal, T = 32768 queries, H = 33
(8448 blocks of 128 queries: 64 waves of 132), S = 128 … 4096 keys (1 … 32 key tiles per block),
d = 128, float16. Prints ms and µs per block-slot (ms / 64); the slope over S is the tile's time,
the intercept the block's fixed cost. --once: one call per S (for ncu)."""
import statistics
import sys

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
    ts = []
    for _ in range(10):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b))
    ms = statistics.median(ts)
    print(f"S={S:5} tiles/block={S // 128:3} {ms:8.3f} ms  {ms / 64 * 1000:7.1f} us per block-slot  "
          f"{4.0 * H * T * S * d / ms / 1e9:6.1f} TFLOP/s", flush=True)
