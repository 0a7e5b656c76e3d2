"""TMA forward smoke test (v30): the ws forward against float64 at odd sizes, fp16/bf16, d 64/96/128/256,
causal and not, GQA, a strided view and a broadcast (cp.async fallback); prints max rel errors."""
import cupy as cp, numpy as np
import cuflash
from cuflash.gpu import ops
from ml_dtypes import bfloat16
rng = np.random.default_rng(1)
def ref(q, k, v, causal):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    G = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, G, 1), np.repeat(v, G, 1)
    s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    if causal:
        T, S = s.shape[-2:]
        s = np.where(np.arange(S)[None] <= np.arange(T)[:, None] + S - T, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
    return p @ v
bad = 0
for dt in (np.float16, bfloat16):
    for d in (64, 96, 128, 256):
        for causal in (False, True):
            for (B, H, Hk, T, S) in ((2, 4, 2, 333, 517), (1, 2, 2, 129, 129)):
                q = rng.standard_normal((B, H, T, d)).astype(dt)
                k = rng.standard_normal((B, Hk, S, d)).astype(dt)
                v = rng.standard_normal((B, Hk, S, d)).astype(dt)
                o = cuflash.attention(cp.asarray(q), cp.asarray(k), cp.asarray(v), causal=causal)
                r = ref(q, k, v, causal)
                err = float(np.abs(cp.asnumpy(o).astype(np.float64) - r).max() / np.abs(r).max())
                tol = 4e-3 if dt == np.float16 else 3e-2
                bad += err > tol
                print(f"{np.dtype(dt).name:8s} d={d:3d} causal={causal:d} {B}x{H}/{Hk} T={T} S={S} err={err:.2e} {'BAD' if err > tol else ''}", flush=True)
# strided (B, T, H, d) view and a k/v broadcast over the batch (no map: cp.async)
q = rng.standard_normal((2, 300, 4, 128)).astype(np.float16)
k = rng.standard_normal((1, 400, 4, 128)).astype(np.float16)
v = rng.standard_normal((1, 400, 4, 128)).astype(np.float16)
qc, kc, vc = (cp.asarray(x).transpose(0, 2, 1, 3) for x in (q, k, v))
kb, vb = cp.broadcast_to(kc, (2, 4, 400, 128)), cp.broadcast_to(vc, (2, 4, 400, 128))
o = cuflash.attention(qc, kb, vb)
r = ref(q.transpose(0, 2, 1, 3), np.broadcast_to(k.transpose(0, 2, 1, 3), (2, 4, 400, 128)),
        np.broadcast_to(v.transpose(0, 2, 1, 3), (2, 4, 400, 128)), False)
err = float(np.abs(cp.asnumpy(o).astype(np.float64) - r).max() / np.abs(r).max())
print(f"strided + broadcast err={err:.2e} {'BAD' if err > 4e-3 else ''}")
bad += err > 4e-3
print("SMOKE", "FAILED" if bad else "OK", bad)
