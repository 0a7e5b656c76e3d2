"""x3 forward outputs on fixed inputs, saved to argv[1] (.npz): run under two trees' PYTHONPATH
and compare (call 172: the staged rows must give main's bits, forward and backward)."""
import sys
import numpy as np
import cupy as cp
import cuflash
from cuflash import TileConfig

out = {}
for i, (d, T, S, hq, hk, opts, bn) in enumerate([
        (64, 300, 333, 4, 2, {}, 64), (128, 1000, 1000, 2, 2, dict(causal=True), 64),
        (96, 257, 700, 2, 1, dict(window=(100, 20), softcap=30.0), 64),
        (128, 513, 513, 2, 2, dict(alibi_slopes=np.array([0.1, 0.3], np.float32)), 32),
        (33, 129, 95, 3, 3, dict(causal=True), 32)]):
    r = np.random.default_rng(i)
    f = lambda h, n: cp.asarray((r.standard_normal((2, h, n, d)) * 2).astype(np.float32))
    q, k, v = f(hq, T), f(hk, S), f(hk, S)
    if "alibi_slopes" in opts:
        opts = dict(opts, alibi_slopes=cp.asarray(opts["alibi_slopes"]))
    o, lse = cuflash.attention(q, k, v, tile=TileConfig(128, bn, 12, 2, "wgmma_f16x3"),
                               return_lse=True, **opts)
    out[f"o{i}"], out[f"lse{i}"] = cp.asnumpy(o), cp.asnumpy(lse)
    if d <= 64:   # the x3 backward pair
        o, res = cuflash.attention(q, k, v, tile=TileConfig(128, bn, 12, 2, "wgmma_f16x3"),
                                   return_residuals=True, **opts)
        g = cuflash.attention_backward(f(hq, T), res, tile=TileConfig(64, 128, 12, 2, "wgmma_f16x3"))
        for n, x in zip("qkv", g):
            out[f"d{n}{i}"] = cp.asnumpy(x)
np.savez(sys.argv[1], **out)
print("saved", len(out))
