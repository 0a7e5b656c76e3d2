"""One small decode step (B = 1, Hkv = 1, Hq = 4, S = 1024, float16, d = 128: 8 splits of 2 key
tiles, one launch) three times, for ncu's source view: where its ~9 us go (issue 14, call 109)."""
import cupy as cp

from cuflash import kvcache

B, Hkv, S, d = 1, 1, 1024, 128
kv = cp.random.standard_normal((2, B, Hkv, S, d), dtype=cp.float32).astype(cp.float16)
q = cp.random.standard_normal((B, 4 * Hkv, 1, d), dtype=cp.float32).astype(cp.float16)
lens = cp.full((B,), S, dtype=cp.int32)
for _ in range(3):
    kvcache.attention_with_kvcache(q, kv[0], kv[1], cache_seqlens=lens, validate=False)
cp.cuda.Device().synchronize()
print("done")
