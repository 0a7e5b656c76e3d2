"""GQA's dK/dV kernel against MHA's (issue 12: 1.5-3.6% slower at T = 16384 non-causal by ncu):
one backward each of G = 1 and G = 8 (Hq = 16, d = 128, float16, B = 1) for ncu."""
import cupy as cp
import numpy as np

import cuflash

rng = np.random.default_rng(0)
rand = lambda *s: cp.asarray(rng.standard_normal(s).astype(np.float16))
T, Hq, d = 16384, 16, 128
q, do = rand(1, Hq, T, d), rand(1, Hq, T, d)
for G in (1, 8):
    k, v = rand(1, Hq // G, T, d), rand(1, Hq // G, T, d)
    _, res = cuflash.attention(q, k, v, return_residuals=True)
    cuflash.attention_backward(do, res)
    cp.cuda.Device().synchronize()
    cp.cuda.profiler.start()
    cuflash.attention_backward(do, res)
    cp.cuda.Device().synchronize()
    cp.cuda.profiler.stop()
