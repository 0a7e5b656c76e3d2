"""Issue 15, call 172: where the x3 kernels' time goes (NOTES v49's next step). float32
'highest' on sm_90 (the x3 kernels are its default there): the forward at d = 128 and d = 64, the
backward pair at d = 64; B = 4, H = 16, T = 4096, non-causal. Run under ncu -k regex:f16x3."""
import sys
import cupy as cp
import numpy as np

import cuflash

rng = np.random.default_rng(0)
f = lambda *s: cp.asarray(rng.standard_normal(s).astype(np.float32))
for d in (128, 64):
    q, k, v = f(4, 16, 4096, d), f(4, 16, 4096, d), f(4, 16, 4096, d)
    o, res = cuflash.attention(q, k, v, return_residuals=True)
    if d == 64:
        cuflash.attention_backward(f(4, 16, 4096, d), res)
    cp.cuda.Device().synchronize()
    print(d, "done", flush=True)
