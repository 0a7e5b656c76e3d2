"""The x3 kernels' racecheck workload (run under compute-sanitizer --tool racecheck): the forward
at d = 64 and 128 (causal), the backward pair at d = 64 dense and causal (GQA 4 / 2) and, with
--d128 (the tree of .ab/x3_bwd_d128.patch), the d = 128 pair too."""
import sys
import numpy as np
import cupy as cp
import cuflash
from cuflash import TileConfig

t = TileConfig(128, 64, 12, 2, "wgmma_f16x3")
r = np.random.default_rng(0)
f = lambda *s: cp.asarray(r.standard_normal(s).astype(np.float32))
for d in (64, 128):
    cuflash.attention(f(1, 2, 300, d), f(1, 2, 333, d), f(1, 2, 333, d), tile=t, causal=True)
pairs = [(64, TileConfig(64, 128, 12, 2, "wgmma_f16x3"))]
if "--d128" in sys.argv:
    pairs.append((128, TileConfig(32, 128, 12, 2, "wgmma_f16x3")))
for d, tb in pairs:
    for opts in ({}, dict(causal=True)):
        q, k, v = f(1, 4, 300, d), f(1, 2, 333, d), f(1, 2, 333, d)
        _, res = cuflash.attention(q, k, v, return_residuals=True, **opts)
        cuflash.attention_backward(f(1, 4, 300, d), res, tile=tb)
cp.cuda.Device().synchronize()
print("ok")
