"""Quick GPU smoke check (a minute): the default kernels against the float64 oracle at odd sizes,
float16 and bfloat16, causal and not, forward and backward, and a batch over the grid limit.
The full check is the gpu test suite; this is for a device call that has little time left."""
import numpy as np, cupy as cp, cuflash, sys
from cuflash.oracle import oracle_attention, oracle_backward
from cuflash._xp import to_numpy
from ml_dtypes import bfloat16
rng = np.random.default_rng(1)
bad = 0
for dt in (np.float16, bfloat16):
    for d in (64, 128):
        for causal in (False, True):
            q, k, v, do = (rng.standard_normal(s).astype(dt) for s in ((3, 200, d), (3, 333, d), (3, 333, d), (3, 200, d)))
            ref, _ = oracle_attention(q, k, v, causal=causal)
            gq, gk, gv, gdo = (cp.asarray(x) for x in (q, k, v, do))
            o, l = cuflash.attention(gq, gk, gv, causal=causal, return_lse=True)
            grads = cuflash.attention_backward(gdo,
                                               cuflash.Residuals(gq, gk, gv, o, l, causal=causal))
            refs = oracle_backward(do, q, k, v, causal=causal)
            eo = np.abs(to_numpy(o).astype(float) - ref).max() / np.abs(ref).max()
            eg = max(np.abs(to_numpy(g).astype(float) - r).max() / np.abs(r).max() for g, r in zip(grads, refs))
            ok = eo < 2e-2 and eg < 5e-2 and np.isfinite(eo) and np.isfinite(eg)
            bad += not ok
            print(f"{np.dtype(dt).name} d={d} causal={causal}: out {eo:.2e} grads {eg:.2e} {'ok' if ok else 'BAD'}")
q, k, v = (cp.asarray(rng.standard_normal((70000, 3, 16)).astype(np.float16)) for _ in range(3))
o = cuflash.attention(q, k, v)
r = cuflash.attention(*(to_numpy(x) for x in (q, k, v)))
e = np.abs(to_numpy(o).astype(float) - r.astype(float)).max()
print("batch 70000:", e); bad += not (e < 1e-2)
sys.exit(1 if bad else 0)
