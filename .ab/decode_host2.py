"""Issue 14's host time per decode step (NOTES v26): B = 1, Hkv = 8, Hq = 32, S_max = 1024,
float16, d = 128, validate=False; wall time per call over 10,000 calls after 100 warm-up calls
(tools/bench_kvcache._host_us), best of 3 runs. Also the GPU time of one step (events over 2000
steps) so that a wall time can be read as host time only where the GPU is quicker, and the
parts of the per-call path alone. Run with PYTHONPATH at the tree to measure."""
import sys, time
import numpy as np
import cupy as cp
import cuflash
from cuflash import kvcache

def host_us(fn, n=10000, runs=3):
    best = 1e9
    for _ in range(runs):
        for _ in range(100):
            fn()
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        cp.cuda.Device().synchronize()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best

def gpu_us(fn, n=2000):
    for _ in range(50):
        fn()
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record()
    for _ in range(n):
        fn()
    b.record(); b.synchronize()
    return cp.cuda.get_elapsed_time(a, b) * 1e3 / n

rng = np.random.default_rng(0)
q = cp.asarray(rng.standard_normal((1, 32, 1, 128)).astype(np.float16))
k, v = (cp.asarray(rng.standard_normal((1, 8, 1024, 128)).astype(np.float16)) for _ in "kv")
kn, vn = (cp.asarray(rng.standard_normal((1, 8, 1, 128)).astype(np.float16)) for _ in "kv")
seqlens = cp.full((1,), 1000, dtype=cp.int32)
tag = sys.argv[1] if len(sys.argv) > 1 else "tree"
steps = {
    "attend": lambda: kvcache.attention_with_kvcache(q, k, v, cache_seqlens=seqlens, validate=False),
    "attend+lse": lambda: kvcache.attention_with_kvcache(q, k, v, cache_seqlens=seqlens, validate=False, return_lse=True),
    "append+attend": lambda: kvcache.attention_with_kvcache(q, k, v, cache_seqlens=seqlens, k_new=kn, v_new=vn, validate=False),
}
for name, fn in steps.items():
    print(f"{tag:6s} {name:14s} host {host_us(fn):6.2f} us/call   gpu {gpu_us(fn):6.2f} us/step", flush=True)
if tag == "new":
    n = 20000
    def part(label, f):
        print(f"  part {label:28s} {host_us(f, n, 2):6.2f} us")
    part("cp.cuda.alloc(64 KiB)", lambda: cp.cuda.alloc(65536))
    mem = cp.cuda.alloc(65536)
    part("cp.ndarray(shape, dt, mem)", lambda: cp.ndarray((1, 32, 1, 128), np.float16, mem))
    part("get_current_stream().ptr", lambda: cp.cuda.get_current_stream().ptr)
    part("runtime.getDevice()", lambda: cp.cuda.runtime.getDevice())
    sig = lambda: kvcache._signature(q, k, v, seqlens, None, None, None, True, None, None, None, False, None)
    part("_signature", sig)
    plan = kvcache._PLANS[sig()]
    part("plan(...) (ForwardLaunch)", lambda: plan(q, k, v, seqlens, None, None, None, False))
    part("cp.empty x2", lambda: (cp.empty((1, 32, 1, 128), cp.float16), cp.empty((1, 32, 1), cp.float32)))
