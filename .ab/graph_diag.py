"""Why did call 96's graph replay differ from the eager call (1x1, S=1024)? Eager vs captured
out on a non-blocking stream, for the library as is, with DECODE_FEW_SPLITS None, and with
the per-thread struct's setDevice skipped."""
import sys
import numpy as np, cupy as cp
from cuflash import kvcache
from cuflash.gpu import ops

def run(tag):
    kvcache._PLANS.clear()
    rng = np.random.default_rng(0)
    q = cp.asarray(rng.standard_normal((1, 4, 1, 128)).astype(np.float16))
    ks = [cp.asarray(rng.standard_normal((1, 1, 1024, 128)).astype(np.float16)) for _ in range(4)]
    vs = [cp.asarray(rng.standard_normal((1, 1, 1024, 128)).astype(np.float16)) for _ in range(4)]
    s = cp.full((1,), 1024, dtype=cp.int32)
    calls = [lambda i=i: kvcache.attention_with_kvcache(q, ks[i], vs[i], cache_seqlens=s, validate=False) for i in range(4)]
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        eager = [fn() for fn in calls]
        stream.synchronize()
        again = [fn() for fn in calls]
        stream.synchronize()
        stream.begin_capture()
        cap = [fn() for fn in calls]
        g = stream.end_capture()
        g.launch(stream); stream.synchronize()
    plan = [p for p in kvcache._PLANS.values() if p is not kvcache._NO_PLAN][0]
    print(tag, "splits", plan.launch.num_splits,
          "eager==again", [bool(cp.array_equal(a, b)) for a, b in zip(eager, again)],
          "eager==graph", [bool(cp.array_equal(a, b)) for a, b in zip(eager, cap)],
          "max|diff|", [float(cp.abs(a.astype(cp.float32) - b.astype(cp.float32)).max()) for a, b in zip(eager, cap)], flush=True)

run("as is")
kvcache.DECODE_FEW_SPLITS = None
run("few None")
kvcache.DECODE_FEW_SPLITS = (32, 2)
real = ops.ForwardLaunch._struct
def no_bind(self):
    import ctypes, threading
    w = self.words.from_buffer_copy(self.template)
    ptr = ops._ONE_POINTER(ctypes.addressof(w))
    self.local.held = held = (w, ctypes.addressof(ptr), ptr)
    return held
ops.ForwardLaunch._struct = no_bind
run("no setDevice")
ops.ForwardLaunch._struct = real
# a fresh struct per call (call 93's code)
orig_call = ops.ForwardLaunch.__call__
def fresh(self, *a, **kw):
    self.local.held = None
    return orig_call(self, *a, **kw)
ops.ForwardLaunch.__call__ = fresh
run("fresh struct per call")
