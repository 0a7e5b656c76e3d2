"""Where the warp-specialized wgmma forward's time goes (issue 13): the default forward of fp16,
d = 128, T = 8192, B = 2, H = 16 (FlashAttention's benchmark shape), non-causal then causal.
Run under
    ncu --profile-from-start off --set full -k regex:fwd python .ab/fwd_ncu.py"""
import cupy as cp
import numpy as np

import cuflash

rng = np.random.default_rng(0)
rand = lambda *s: cp.asarray(rng.standard_normal(s).astype(np.float16))
B, H, T, d = 2, 16, 8192, 128
q, k, v = (rand(B, H, T, d) for _ in range(3))
for causal in (False, True):
    cuflash.attention(q, k, v, causal=causal)
cp.cuda.Device().synchronize()
cp.cuda.profiler.start()
for causal in (False, True):
    cuflash.attention(q, k, v, causal=causal)
cp.cuda.Device().synchronize()
cp.cuda.profiler.stop()
