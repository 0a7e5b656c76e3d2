"""Compile (and cache on disk) the forward kernels tools/ab_speed.py --passes fwd times, for the
cuflash imported from PYTHONPATH: float16 and bfloat16, d = 64 and 128, causal and not. Lets
several trees compile side by side before their timed runs."""
import cupy as cp
import numpy as np
from ml_dtypes import bfloat16

import cuflash

for dt in (np.float16, bfloat16):
    for d in (64, 128):
        q, k, v = (cp.asarray(np.random.default_rng(i).standard_normal((1, 2, 512, d)).astype(dt))
                   for i in range(3))
        for causal in (False, True):
            cuflash.attention(q, k, v, causal=causal)
cp.cuda.Device().synchronize()
print("warm", cuflash.__file__)
