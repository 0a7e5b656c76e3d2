"""Issue 15's open finding (NOTES v22): at T = 16384, non-causal, cuflash's float32 error is ~10x
torch efficient's in both 'ieee' and 'highest'. One head, d = 64, standard-normal q, k, v
(float32), T = S in 1024, 4096, 16384: max-norm error (max |err| / max |oracle|) of out, the
absolute error of lse, for naive float32 ('ieee', cuBLAS), cuflash 'ieee' (CUDA cores),
'highest' and 'tf32', and torch's efficient kernel when torch is there; then, for cuflash 'ieee'
at the longest T, where the error sits: the rows of the 5 largest errors with their lse error,
and the correlation over rows of |out error| with |lse error|.
    python .ab/f32_longT.py [--T 1024,4096,16384] [--d 64] [--scale 1]"""
import argparse

import cupy as cp
import numpy as np

import cuflash

ap = argparse.ArgumentParser()
ap.add_argument("--T", default="1024,4096,16384")
ap.add_argument("--d", type=int, default=64)
ap.add_argument("--scale", type=float, default=1.0, help="inputs' standard deviation")
a = ap.parse_args()
try:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    torch = None
rng = np.random.default_rng(0)
print(f"d={a.d} scale={a.scale}; out: max|err|/max|oracle|, lse: max|err|")
for T in map(int, a.T.split(",")):
    q, k, v = (cp.asarray(rng.standard_normal((1, 1, T, a.d)).astype(np.float32) * a.scale)
               for _ in range(3))
    ref_o, ref_l = cuflash.naive_attention(*(x.astype(cp.float64) for x in (q, k, v)),
                                           return_lse=True)
    runs = {"naive ieee": lambda: cuflash.naive_attention(q, k, v, precision="ieee", return_lse=True)}
    for p in ("ieee", "highest", "tf32"):
        runs[p] = lambda p=p: cuflash.attention(q, k, v, precision=p, return_lse=True)
    if torch is not None:
        def _torch():
            tq, tk, tv = (torch.as_tensor(x, device="cuda") for x in (q, k, v))
            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                o = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)
            return cp.asarray(o), None
        runs["torch efficient"] = _torch
    mx = float(cp.abs(ref_o).max())
    for name, f in runs.items():
        o, l = f()
        err = cp.abs(o.astype(cp.float64) - ref_o)
        le = "" if l is None else f"  lse {float(cp.abs(l.astype(cp.float64) - ref_l).max()):.2e}"
        print(f"T={T:6d} {name:16s} out {float(err.max()) / mx:.2e}{le}")
        if name == "ieee" and T == max(map(int, a.T.split(","))):
            row_err = err[0, 0].max(axis=1)
            lse_err = cp.abs(l.astype(cp.float64) - ref_l)[0, 0]
            top = cp.argsort(row_err)[-5:].get()
            for i in top:
                print(f"    row {i:6d} |out err| {float(row_err[i]):.2e} (max|oracle row| "
                      f"{float(cp.abs(ref_o[0, 0, i]).max()):.2e}) lse err {float(lse_err[i]):.2e} "
                      f"lse {float(ref_l[0, 0, i]):.3f}")
            c = np.corrcoef(row_err.get(), lse_err.get())[0, 1]
            print(f"    corr(|out err| per row, |lse err|) = {c:.3f}")
