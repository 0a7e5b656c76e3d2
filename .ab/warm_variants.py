"""Compile (and cache on disk) the kernels tools/bench_variants.py's modifiers part runs, for the
cuflash imported from PYTHONPATH: float16, d = 128, T = 8192, plain / softcap / ALiBi / both,
causal and not. Lets several trees compile side by side before their timed runs."""
import cupy as cp
import numpy as np

import cuflash

H, T, d = 16, 8192, 128
q, k, v = (cp.asarray(np.random.default_rng(i).standard_normal((1, H, T, d)).astype(np.float16))
           for i in range(3))
slopes = cp.asarray((2.0 ** (-8.0 * np.arange(1, H + 1) / H)).astype(np.float32))
for causal in (False, True):
    for kw in ({}, dict(softcap=30.0), dict(alibi_slopes=slopes),
               dict(softcap=30.0, alibi_slopes=slopes)):
        cuflash.attention(q, k, v, causal=causal, **kw)
cp.cuda.Device().synchronize()
print("warm", cuflash.__file__)
