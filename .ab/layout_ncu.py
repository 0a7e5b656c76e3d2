"""Kernel-level view of issue 12's remaining cells (ncu, locked clocks): the causal forward and
backward on a (B, T, H, d) view against contiguous (B = 4, T = 4096, H = 16, d = 128), and the
causal forward at T = 2048 for G = 1 and 4 (B = 8, Hq = 16). Launch order: view fwd, view bwd
(preprocess, dK/dV, dQ), contiguous fwd, contiguous bwd, then G = 1 fwd, G = 4 fwd, each twice."""
import cupy as cp
import numpy as np

import cuflash

rng = np.random.default_rng(0)
rand = lambda *s: cp.asarray(rng.standard_normal(s).astype(np.float16))
B, T, H, d = 4, 4096, 16, 128
base = [rand(B, T, H, d) for _ in range(4)]
views = [x.transpose(0, 2, 1, 3) for x in base]
conts = [cp.ascontiguousarray(x) for x in views]
runs = []
for q, k, v, do in (views, conts):
    _, res = cuflash.attention(q, k, v, causal=True, return_residuals=True)
    cuflash.attention_backward(do, res)
    runs.append((lambda q=q, k=k, v=v: cuflash.attention(q, k, v, causal=True),
                 lambda do=do, res=res: cuflash.attention_backward(do, res)))
B2, T2 = 8, 2048
q2 = rand(B2, 16, T2, d)
for G in (1, 4):
    k2, v2 = rand(B2, 16 // G, T2, d), rand(B2, 16 // G, T2, d)
    f = lambda k2=k2, v2=v2: cuflash.attention(q2, k2, v2, causal=True)
    f()
    runs.append((f, None))
cp.cuda.Device().synchronize()
cp.cuda.profiler.start()
for fwd, bwd in runs:
    for _ in range(2):
        fwd()
        if bwd is not None:
            bwd()
cp.cuda.Device().synchronize()
cp.cuda.profiler.stop()
