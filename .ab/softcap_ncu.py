"""Issue 11 (NOTES v80): where softcap's forward time goes, per arm (the cuflash on PYTHONPATH).
float16, d = 128, T = 8192, B = 2, H = 16, non-causal (tools/bench_variants.py's modifiers case):
plain and softcap 30, each launched twice; run under ncu -k regex:softcap --launch-skip 1
--launch-count 1 to profile the second softcap launch (ncu locks the clocks to base). With --time:
each case's wall time instead (CUDA events, median of 7 single launches, 20 ms apart) and of a
back-to-back batch of 20."""
import sys
import time

import cupy as cp
import numpy as np

import cuflash

B, H, T, d = 2, 16, 8192, 128
rng = np.random.default_rng(0)
f = lambda: cp.asarray(rng.standard_normal((B, H, T, d)).astype(np.float16))
q, k, v = f(), f(), f()
cases = {"plain": {}, "softcap": dict(softcap=30.0)}
if "--time" not in sys.argv:
    for kw in cases.values():
        for _ in range(2):
            cuflash.attention(q, k, v, **kw)
    cp.cuda.Device().synchronize()
    sys.exit(0)
res = {}
for name, kw in cases.items():
    cuflash.attention(q, k, v, **kw)
    one = []
    for _ in range(7):
        time.sleep(0.02)
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(); cuflash.attention(q, k, v, **kw); b.record(); b.synchronize()
        one.append(cp.cuda.get_elapsed_time(a, b))
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record()
    for _ in range(20):
        cuflash.attention(q, k, v, **kw)
    b.record(); b.synchronize()
    res[name] = (sorted(one)[3], cp.cuda.get_elapsed_time(a, b) / 20)
for name, (s, batch) in res.items():
    print(f"{name:8} single {s:.3f} ms  batch {batch:.3f} ms  ratio single "
          f"{s / res['plain'][0]:.3f} batch {batch / res['plain'][1]:.3f}")
