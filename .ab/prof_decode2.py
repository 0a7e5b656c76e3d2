"""One decode configuration called repeatedly, for ncu: B, Hkv, S, tile from argv."""
import sys
import cupy as cp, numpy as np
from cuflash import TileConfig, kvcache
B, Hkv, S = (int(x) for x in sys.argv[1:4])
tile = TileConfig(*(int(x) for x in sys.argv[4].split("x")), "mma") if len(sys.argv) > 4 else None
kvcache.DECODE_TILE = tile
if len(sys.argv) > 5:
    kvcache.DECODE_MAX_SPLITS = int(sys.argv[5])
d, G = 128, 4
rng = np.random.default_rng(0)
q = cp.asarray(rng.standard_normal((B, G * Hkv, 1, d)).astype(np.float16))
k = cp.random.standard_normal((B, Hkv, S, d), dtype=cp.float32).astype(cp.float16)
v = cp.random.standard_normal((B, Hkv, S, d), dtype=cp.float32).astype(cp.float16)
lens = cp.full((B,), S, dtype=cp.int32)
for _ in range(6):
    kvcache.attention_with_kvcache(q, k, v, cache_seqlens=lens, validate=False)
cp.cuda.Device().synchronize()
