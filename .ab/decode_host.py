"""Issue 14's host time: where a decode step's ~21 µs go (B = 1, Hkv = 8, Hq = 32, S = 1024,
float16, d = 128, validate=False, no append): wall time per call over 10,000 calls, then
cProfile's top functions by own time, and the times of the parts measured alone (launch only,
the output allocations, a bare RawKernel launch of the same kernel)."""
import cProfile, pstats, sys
from pathlib import Path
import numpy as np
import cupy as cp
from cuflash import kvcache

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from bench_kvcache import _host_us   # noqa: E402 (warm-up 100 calls, then n timed)

rng = np.random.default_rng(0)
q = cp.asarray(rng.standard_normal((1, 32, 1, 128)).astype(np.float16))
k, v = (cp.asarray(rng.standard_normal((1, 8, 1024, 128)).astype(np.float16)) for _ in "kv")
seqlens = cp.full((1,), 1000, dtype=cp.int32)
fn = lambda: kvcache.attention_with_kvcache(q, k, v, cache_seqlens=seqlens, validate=False)


def us(f, n=10000):
    return _host_us(cp, f, n)


print(f"decode step: {us(fn):.1f} us per call")
print(f"two cp.empty: {us(lambda: (cp.empty((1, 32, 1, 128), cp.float16), cp.empty((1, 32, 1), cp.float32))):.1f} us")
key = next(iter(kvcache._PLANS))
plan = kvcache._PLANS[key]
print(f"plan(...) alone: {us(lambda: plan(q, k, v, seqlens, None, None, None)):.1f} us")
sig = lambda: kvcache._signature(q, k, v, seqlens, None, None, None, True, None, None, None, False, None)
print(f"_signature alone: {us(sig):.1f} us")
prof = cProfile.Profile()
prof.enable()
for _ in range(3000):
    fn()
prof.disable()
pstats.Stats(prof).sort_stats("tottime").print_stats(22)
