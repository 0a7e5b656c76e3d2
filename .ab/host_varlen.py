"""Host time per call (µs, wall, n calls then one sync) of a tiny dense forward and of
attention_varlen given a SeqLens, the arrays, and the arrays with both max_seqlen bounds
(v21): what the GPU idles for when a call reads cu_seqlens back."""
import time
import numpy as np, cupy as cp
import cuflash

rng = np.random.default_rng(0)
Hq, d, L, n = 4, 64, 64, 8
r = lambda shape: cp.asarray(rng.standard_normal(shape).astype(np.float16))
q, k, v = (r((n * L, Hq, d)) for _ in range(3))
cu = cp.asarray(np.arange(0, n * L + 1, L).astype(np.int32))
sl = cuflash.SeqLens(cu)
dq = q.reshape(n, L, Hq, d).transpose(0, 2, 1, 3).copy()
runs = {"dense": lambda: cuflash.attention(dq, dq, dq, causal=True),
        "varlen SeqLens": lambda: cuflash.attention_varlen(q, k, v, sl, causal=True),
        "varlen arrays": lambda: cuflash.attention_varlen(q, k, v, cu, cu, causal=True),
        "varlen arrays+bounds": lambda: cuflash.attention_varlen(q, k, v, cu, cu, causal=True,
                                                                 max_seqlen_q=L, max_seqlen_k=L)}
for name, f in runs.items():
    for _ in range(20):
        f()
    cp.cuda.Device().synchronize()
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(300):
            f()
        cp.cuda.Device().synchronize()
        best.append((time.perf_counter() - t0) / 300 * 1e6)
    print(f"{name:22s} {min(best):7.1f} us/call (min of 5 x 300)")
