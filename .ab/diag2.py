"""Graph of 4 decode calls (B=1, Hkv=1, S=131072, 16 splits) against eager calls, with and
without the launches' argument buffers kept alive."""
import cupy as cp, numpy as np, sys
from cuflash import TileConfig, kvcache
from cuflash.gpu import ops
sys.path.insert(0, "tools")
from bench_kvcache import _random_f16
B, Hkv, S, d, G, n = 1, 1, 131072, 128, 4, 4
rng = np.random.default_rng(0)
qs = [cp.asarray(rng.standard_normal((B, G * Hkv, 1, d)).astype(np.float16)) for _ in range(n)]
bufs = [_random_f16(cp, (2, B, Hkv, S, d)) for _ in range(n)]
lens = cp.full((B,), S, dtype=cp.int32)
for keep in (False, True, False):
  for cap in (16, 128):
    kvcache.DECODE_MAX_SPLITS = cap
    ops._KEEP_ARGS = [] if keep else None
    calls = [lambda i=i: kvcache.attention_with_kvcache(qs[i], bufs[i][0], bufs[i][1], cache_seqlens=lens, validate=False) for i in range(n)]
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        eager = [c() for c in calls]; s.synchronize()
        s.begin_capture(); cap_out = [c() for c in calls]; g = s.end_capture()
        g.launch(s); s.synchronize()
        bad = [i for i in range(n) if not bool(cp.array_equal(cap_out[i], eager[i]))]
        a, b = cp.cuda.Event(), cp.cuda.Event(); a.record(s); g.launch(s); b.record(s); b.synchronize()
        ms = cp.cuda.get_elapsed_time(a, b) / n
    print(f"keep_args={keep} cap={cap}: graph results differing from eager: {bad}; {2*B*Hkv*S*d*2/ms/1e9:.2f} TB/s", flush=True)
