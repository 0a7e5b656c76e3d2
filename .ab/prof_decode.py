import cProfile, pstats, cupy as cp, numpy as np
from cuflash import kvcache
rng = np.random.default_rng(0)
q = cp.asarray(rng.standard_normal((1, 32, 1, 128)).astype(np.float16))
k = cp.asarray(rng.standard_normal((1, 8, 1024, 128)).astype(np.float16))
v = cp.asarray(rng.standard_normal((1, 8, 1024, 128)).astype(np.float16))
s = cp.full((1,), 1024, dtype=cp.int32)
for _ in range(20): kvcache.attention_with_kvcache(q, k, v, cache_seqlens=s)
cp.cuda.Device().synchronize()
pr = cProfile.Profile(); pr.enable()
for _ in range(300): kvcache.attention_with_kvcache(q, k, v, cache_seqlens=s)
cp.cuda.Device().synchronize()
pr.disable(); pstats.Stats(pr).sort_stats("tottime").print_stats(18)
