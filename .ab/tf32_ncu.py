"""Issue 15, call 151: where the TF32 wgmma forward's time goes (NOTES v39's next step). One
forward each of the TF32 wgmma kernel (float32, precision='tf32', its default on sm_90) and the
16-bit wgmma forward at the same shape (d = 128, B = 4, H = 16, T = 4096, non-causal), each run
twice (the first compiles); run under ncu -k regex:'wgmma.*fwd' --launch-skip 1."""
import cupy as cp
import numpy as np

import cuflash

rng = np.random.default_rng(0)
shape = (4, 16, 4096, 128)
for dt, kw in ((np.float32, dict(precision="tf32")), (np.float16, {})):
    q, k, v = (cp.asarray(rng.standard_normal(shape).astype(dt)) for _ in range(3))
    for _ in range(2):
        cuflash.attention(q, k, v, **kw)
    cp.cuda.Device().synchronize()
    print(dt.__name__, "done", flush=True)
