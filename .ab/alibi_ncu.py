"""Issue 11 (NOTES v73's open question): where ALiBi's 24-67% over the plain 16-bit forward goes.
float16, d = 128, T = 8192, B = 2, H = 16 (tools/bench_variants.py's modifiers case): plain and
ALiBi, causal and not, each launched twice (the second is the one to read); run under
ncu -k regex:fwd. Prints each case's wall time (cupy events, median of 5) first."""
import sys
import cupy as cp
import numpy as np

import cuflash

B, H, T, d = 2, 16, 8192, 128
rng = np.random.default_rng(0)
f = lambda: cp.asarray(rng.standard_normal((B, H, T, d)).astype(np.float16))
q, k, v = f(), f(), f()
slopes = cp.asarray((2.0 ** (-8.0 * np.arange(1, H + 1) / H)).astype(np.float32))
cases = [(c, a) for c in (False, True) for a in (False, True)]
timing = "--time" in sys.argv
for causal, alibi in cases:
    kw = dict(alibi_slopes=slopes) if alibi else {}
    for _ in range(2 if not timing else 1):
        cuflash.attention(q, k, v, causal=causal, **kw)
    if timing:
        ts = []
        for _ in range(5):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record(); cuflash.attention(q, k, v, causal=causal, **kw); b.record(); b.synchronize()
            ts.append(cp.cuda.get_elapsed_time(a, b))
        print(f"causal={causal} alibi={alibi} {sorted(ts)[2]:.3f} ms", flush=True)
cp.cuda.Device().synchronize()
