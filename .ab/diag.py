"""Why call 27 read above the HBM peak: graph replays vs eager calls, events vs wall clock."""
import time
import cupy as cp, numpy as np
from cuflash import TileConfig, kvcache
import sys
sys.path.insert(0, "tools")
from bench_kvcache import _random_f16
B, Hkv, S, d, G = 1, 8, 131072, 128, 4
rng = np.random.default_rng(0)
q = cp.asarray(rng.standard_normal((B, G * Hkv, 1, d)).astype(np.float16))
buf = _random_f16(cp, (2, B, Hkv, S, d))
k, v = buf[0], buf[1]
lens = cp.full((B,), S, dtype=cp.int32)
nbytes = 2 * B * Hkv * S * d * 2
for tile, cap in ((None, 128), (TileConfig(16, 64, 1, 2, "mma"), 16), (TileConfig(16, 64, 1, 2, "mma"), 128)):
    kvcache.DECODE_TILE, kvcache.DECODE_MAX_SPLITS = tile, cap
    call = lambda: kvcache.attention_with_kvcache(q, k, v, cache_seqlens=lens, validate=False, return_lse=True)
    ref, ref_lse = call(); cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(5): call()
    cp.cuda.Device().synchronize(); eager_ms = (time.perf_counter() - t0) / 5 * 1e3
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        call(); s.synchronize()
        s.begin_capture(); out, lse = call(); g = s.end_capture()
        g.launch(s); s.synchronize()
        diff = float(cp.abs(out.astype(cp.float32) - ref.astype(cp.float32)).max())
        a, b = cp.cuda.Event(), cp.cuda.Event()
        t0 = time.perf_counter(); a.record(s)
        for _ in range(5): g.launch(s)
        b.record(s); b.synchronize(); wall = (time.perf_counter() - t0) / 5 * 1e3
        ev = cp.cuda.get_elapsed_time(a, b) / 5
    plan = [p for p in kvcache._PLANS.values() if p is not kvcache._NO_PLAN][-1]
    print(f"tile={tile and tile.short()} cap={cap} splits={plan.launch.num_splits}: eager {eager_ms:.3f} ms "
          f"({nbytes / eager_ms / 1e9:.2f} TB/s), graph event {ev:.3f} ms wall {wall:.3f} ms "
          f"({nbytes / ev / 1e9:.2f} TB/s), max|graph - eager| {diff:.3g}, lse finite {bool(cp.isfinite(lse).all())}",
          flush=True)
