"""Where the wgmma backward's time goes (issue 13): ncu's full set on the dK/dV and dQ kernels of
the default tile (64 x 64 x 4 warps), the 8-warp tile (64 x 128 x 8) and the warp-specialized
one (64 x 128 x 12; branch ws-backward), fp16,
d = 128, T = 8192, B = 2, H = 16, non-causal. Run under
    ncu --profile-from-start off --set full -k regex:bwd python .ab/bwd_ncu.py"""
import cupy as cp
import numpy as np

import cuflash

rng = np.random.default_rng(0)
rand = lambda *s: cp.asarray(rng.standard_normal(s).astype(np.float16))
B, H, T, d = 2, 16, 8192, 128
q, k, v, do = (rand(B, H, T, d) for _ in range(4))
_, res = cuflash.attention(q, k, v, return_residuals=True)
tiles = {"default": None, "8warp": cuflash.TileConfig(64, 128, 8, 2, "wgmma"),
         "ws": cuflash.TileConfig(64, 128, 12, 2, "wgmma")}
for t in tiles.values():
    cuflash.attention_backward(do, res, tile=t)
cp.cuda.Device().synchronize()
cp.cuda.profiler.start()
for name, t in tiles.items():
    cp.cuda.nvtx.RangePush(f"bwd {name}")
    cuflash.attention_backward(do, res, tile=t)
    cp.cuda.nvtx.RangePop()
cp.cuda.Device().synchronize()
cp.cuda.profiler.stop()
