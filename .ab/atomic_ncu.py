"""Where the atomic-dQ ws dK/dV kernel's time goes (v20): the deterministic ws pair (dK/dV, dQ)
and the atomic ws dK/dV kernel (red.global dQ), fp16, d = 128, T = 8192, B = 2, H = 16,
non-causal. Run under
    ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats \
        --metrics lts__t_requests_op_red.sum,lts__t_sectors_op_red.sum -k regex:bwd python .ab/atomic_ncu.py"""
import cupy as cp
import numpy as np

import cuflash

rng = np.random.default_rng(0)
rand = lambda *s: cp.asarray(rng.standard_normal(s).astype(np.float16))
B, H, T, d = 2, 16, 8192, 128
q, k, v, do = (rand(B, H, T, d) for _ in range(4))
_, res = cuflash.attention(q, k, v, return_residuals=True)
ws = cuflash.TileConfig(64, 128, 12, 2, "wgmma")
for det in (True, False):
    cuflash.attention_backward(do, res, tile=ws, deterministic=det)
cp.cuda.Device().synchronize()
cp.cuda.profiler.start()
for det in (True, False):
    cuflash.attention_backward(do, res, tile=ws, deterministic=det)
cp.cuda.Device().synchronize()
cp.cuda.profiler.stop()
