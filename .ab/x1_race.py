"""compute-sanitizer over the x1 ('tf32', one float16 product) forward and backward, or with
argv[1] = wgmma_f16x3 the x3 ('highest') ones: d 64 / 128, causal and not, odd T != S, every
forward and backward tile of the family."""
import sys
import cupy as cp
import numpy as np
import cuflash
from cuflash import TileConfig as TC
from cuflash.tile import wgmma_f16x3_tiles

rng = np.random.default_rng(0)
for d in (64, 128):
    fam = sys.argv[1] if sys.argv[1:] else "wgmma_f16x1"
    prec = "tf32" if fam == "wgmma_f16x1" else "highest"
    fw = wgmma_f16x3_tiles(d, False, fam)
    bw = wgmma_f16x3_tiles(d, True, fam)
    q = cp.asarray(rng.standard_normal((1, 2, 131, d)).astype(np.float32))
    k = cp.asarray(rng.standard_normal((1, 2, 197, d)).astype(np.float32))
    v = cp.asarray(rng.standard_normal((1, 2, 197, d)).astype(np.float32))
    for causal in (False, True):
        for t in fw:
            out, lse = cuflash.attention(q, k, v, causal=causal, precision=prec, tile=t,
                                         return_lse=True)
        for t in bw:
            g = cuflash.attention_backward(cp.ones_like(out), cuflash.Residuals(
                q, k, v, out, lse, causal=causal), precision=prec, tile=t)
        cp.cuda.runtime.deviceSynchronize()
        print(d, causal, [t.short() for t in fw], [t.short() for t in bw], flush=True)
print("done")
