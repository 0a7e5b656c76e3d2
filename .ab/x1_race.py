"""compute-sanitizer over the x1 ('tf32', one float16 product) forward and backward: d 64 / 128,
causal and not, odd T != S, every forward tile shape, 2 and 3 stages."""
import cupy as cp
import numpy as np
import cuflash
from cuflash import TileConfig as TC
from cuflash.tile import wgmma_f16x3_tiles

rng = np.random.default_rng(0)
for d in (64, 128):
    fw = wgmma_f16x3_tiles(d, False, "wgmma_f16x1")
    bw = wgmma_f16x3_tiles(d, True, "wgmma_f16x1")
    q = cp.asarray(rng.standard_normal((1, 2, 131, d)).astype(np.float32))
    k = cp.asarray(rng.standard_normal((1, 2, 197, d)).astype(np.float32))
    v = cp.asarray(rng.standard_normal((1, 2, 197, d)).astype(np.float32))
    for causal in (False, True):
        for t in fw:
            out, lse = cuflash.attention(q, k, v, causal=causal, precision="tf32", tile=t,
                                         return_lse=True)
        for t in bw:
            g = cuflash.attention_backward(cp.ones_like(out), cuflash.Residuals(
                q, k, v, out, lse, causal=causal), precision="tf32", tile=t)
        cp.cuda.runtime.deviceSynchronize()
        print(d, causal, [t.short() for t in fw], [t.short() for t in bw], flush=True)
print("done")
