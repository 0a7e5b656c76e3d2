"""Where float32's lse error at long T comes from (NOTES v24). One head, d = 64, standard-normal
q, k, v; per kernel and tile: max |lse err| and the signed mean over rows (a bias says a
systematic loss, not rounding noise), and how the rows' errors of two kernels correlate.
    python .ab/f32_lse_probe.py"""
import cupy as cp
import numpy as np

import cuflash
from cuflash import TileConfig

rng = np.random.default_rng(0)
d = 64
print("T       kernel/tile                 max|lse err|  mean(lse err)  out maxnorm")
for T in (1024, 4096, 16384, 32768):
    q, k, v = (cp.asarray(rng.standard_normal((1, 1, T, d)).astype(np.float32)) for _ in range(3))
    ref_o, ref_l = cuflash.naive_attention(*(x.astype(cp.float64) for x in (q, k, v)), return_lse=True)
    mx = float(cp.abs(ref_o).max())
    runs = {"naive": lambda: cuflash.naive_attention(q, k, v, precision="ieee", return_lse=True)}
    for name, kw in [("ieee default", dict(precision="ieee")),
                     ("simt 64x32", dict(tile=TileConfig(64, 32, 4, 2, "simt"))),
                     ("simt 64x128", dict(tile=TileConfig(64, 128, 4, 2, "simt"))),
                     ("highest default", dict(precision="highest")),
                     ("tf32x3 64x16", dict(tile=TileConfig(64, 16, 4, 2, "tf32x3"))),
                     ("tf32x3 64x64", dict(tile=TileConfig(64, 64, 4, 2, "tf32x3")))]:
        runs[name] = lambda kw=kw: cuflash.attention(q, k, v, return_lse=True, **kw)
    errs = {}
    for name, f in runs.items():
        try:
            o, l = f()
        except Exception as exc:   # a tile that does not fit
            print(f"{T:6d}  {name:26s} {type(exc).__name__}: {str(exc)[:60]}")
            continue
        e = (l.astype(cp.float64) - ref_l)[0, 0]
        errs[name] = e
        oe = float(cp.abs(o.astype(cp.float64) - ref_o).max()) / mx
        print(f"{T:6d}  {name:26s} {float(cp.abs(e).max()):.2e}      {float(e.mean()):+.2e}      {oe:.2e}")
    if "ieee default" in errs and "highest default" in errs:
        c = np.corrcoef(errs["ieee default"].get(), errs["highest default"].get())[0, 1]
        print(f"{T:6d}  corr(ieee, highest) over rows {c:.3f}")
    # the row with the largest error: its scores' spread
    e = errs["ieee default"]; i = int(cp.argmax(cp.abs(e)))
    s = (q[0, 0, i].astype(cp.float64) @ k[0, 0].astype(cp.float64).T) / np.sqrt(d)
    print(f"{T:6d}  worst row {i}: lse {float(ref_l[0,0,i]):.3f} max s {float(s.max()):.3f} "
          f"err ieee {float(e[i]):+.2e} highest {float(errs['highest default'][i]):+.2e}")
