"""Issue 15's bar at long T, forward and backward: float32 error against the float64 oracle
(naive in float64 on the GPU) of naive float32, cuflash 'ieee' (CUDA-core forward and backward),
'highest' (3xTF32 forward, the CUDA-core backward: float32's defaults) and torch's efficient
kernel, one head of standard-normal q, k, v, dout, T = S. Each cell: max |err| / max |oracle|
(lse: max |err|), and the ratio to naive float32's, which the criterion holds to <= 2.
    python .ab/f32_long_bwd.py [--T 4096,16384] [--d 64,128] [--causal 0,1]"""
import argparse

import cupy as cp
import numpy as np

import cuflash

ap = argparse.ArgumentParser()
ap.add_argument("--T", default="4096,16384")
ap.add_argument("--d", default="64,128")
ap.add_argument("--causal", default="0,1")
a = ap.parse_args()
try:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    torch = None
NAMES = ("out", "lse", "dq", "dk", "dv")


def err(x, ref, name):
    x = x.astype(cp.float64)
    e = float(cp.abs(x - ref).max())
    return e if name == "lse" else e / float(cp.abs(ref).max())


def cuflash_run(q, k, v, do, causal, precision):
    out, lse, res = cuflash.attention(q, k, v, causal=causal, precision=precision,
                                      return_lse=True, return_residuals=True)
    return (out, lse) + tuple(cuflash.attention_backward(do, res))


def naive_run(q, k, v, do, causal):
    out, lse = cuflash.naive_attention(q, k, v, causal=causal, return_lse=True)
    return (out, lse) + tuple(cuflash.naive_attention_backward(do, q, k, v, causal=causal))


def torch_run(q, k, v, do, causal):
    tq, tk, tv = (torch.as_tensor(x, device="cuda").requires_grad_() for x in (q, k, v))
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        o = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
    o.backward(torch.as_tensor(do, device="cuda"))
    return (cp.asarray(o.detach()), None) + tuple(cp.asarray(t.grad) for t in (tq, tk, tv))


rows = []
for d in map(int, a.d.split(",")):
    for T in map(int, a.T.split(",")):
        for causal in (bool(int(c)) for c in a.causal.split(",")):
            rng = np.random.default_rng(T + d + causal)
            q, k, v, do = (cp.asarray(rng.standard_normal((1, 1, T, d)).astype(np.float32))
                           for _ in range(4))
            ref = naive_run(*(x.astype(cp.float64) for x in (q, k, v, do)), causal)
            runs = {"naive f32": lambda: naive_run(q, k, v, do, causal),
                    "ieee": lambda: cuflash_run(q, k, v, do, causal, "ieee"),
                    "highest": lambda: cuflash_run(q, k, v, do, causal, "highest")}
            if torch is not None:
                runs["torch eff"] = lambda: torch_run(q, k, v, do, causal)
            errs = {}
            for who, f in runs.items():
                got = f()
                errs[who] = [None if g is None else err(g, r, n) for g, r, n in zip(got, ref, NAMES)]
                del got
            cp.get_default_memory_pool().free_all_blocks()
            for who, e in errs.items():
                cells = "  ".join("      -        " if x is None else
                                  f"{x:.2e} ({x / errs['naive f32'][i]:4.2f})"
                                  for i, x in enumerate(e))
                print(f"d={d:3d} T={T:6d} causal={int(causal)} {who:10s} {cells}", flush=True)
print("columns:", "  ".join(NAMES), "— error (its ratio to naive float32's)")
