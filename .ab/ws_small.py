# the warp-specialized forward on small odd shapes against the default wgmma kernel and float64
import sys, numpy as np, cupy as cp
import cuflash
from cuflash import TileConfig
from cuflash.oracle import oracle_attention
rng = np.random.default_rng(1)
tiles = [TileConfig(128, 128, 12, 2, "wgmma"), TileConfig(128, 64, 12, 4, "wgmma")]
for (B, H, T, S, d) in [(2, 3, 257, 300, 128), (1, 2, 1000, 1000, 64), (1, 1, 5, 129, 96)]:
    for causal in (False, True):
        q = rng.standard_normal((B, H, T, d)); k = rng.standard_normal((B, H, S, d)); v = rng.standard_normal((B, H, S, d))
        ref = oracle_attention(q, k, v, causal=causal)[0]
        qd, kd, vd = (cp.asarray(x.astype(np.float16)) for x in (q, k, v))
        base = cp.asnumpy(cuflash.attention(qd, kd, vd, causal=causal)).astype(np.float64)
        e0 = np.abs(base - ref).max()
        for t in tiles:
            o = cp.asnumpy(cuflash.attention(qd, kd, vd, causal=causal, tile=t)).astype(np.float64)
            print(f"B{B} H{H} T{T} S{S} d{d} causal={causal} {t.short()}: err {np.abs(o - ref).max():.2e} (default {e0:.2e})", flush=True)
