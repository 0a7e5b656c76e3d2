"""Probe (session 49): the 16-bit ws forward on 192 x 128 tiles at d = 64, three consumer
warpgroups (FlashAttention-3's d = 64 tile; .ab/m192_probe.patch). Its output and lse against a
float64 oracle, beside the default tile's, at odd shapes, causal and not, for the cuflash
imported from PYTHONPATH (after .ab/n176_check.py)."""
import cupy as cp
import numpy as np
from ml_dtypes import bfloat16

import cuflash
from cuflash import TileConfig


def oracle(q, k, v, causal):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    T, S = q.shape[-2], k.shape[-2]
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        i = np.arange(T)[:, None]; j = np.arange(S)[None, :]
        s = np.where(j <= i + S - T, s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m); l = p.sum(-1, keepdims=True)
    return (p / l) @ v, (m + np.log(l))[..., 0]


bad = 0
for dt in (np.float16, bfloat16):
    for (T, S) in ((1000, 1000), (700, 1333), (333, 2900)):
        for causal in (False, True):
            rng = np.random.default_rng(T + S)
            q, k, v = (rng.standard_normal((2, 3, n, 64)).astype(dt) for n in (T, S, S))
            o_ref, lse_ref = oracle(q, k, v, causal)
            errs = []
            for tile in (None, TileConfig(192, 128, 16, 2, "wgmma")):
                o, lse = cuflash.attention(*(cp.asarray(x) for x in (q, k, v)), causal=causal,
                                           tile=tile, return_lse=True)
                o = cp.asnumpy(o).astype(np.float64)
                lse = cp.asnumpy(lse).astype(np.float64)
                errs.append((np.abs(o - o_ref).max(), np.abs(lse - lse_ref).max()))
            ok = errs[1][0] <= 2 * errs[0][0] + 1e-6 and errs[1][1] <= 2 * errs[0][1] + 1e-6
            bad += not ok
            print(f"{dt.__name__:9} T={T} S={S} causal={causal}: default o {errs[0][0]:.2e} "
                  f"lse {errs[0][1]:.2e} | 192 o {errs[1][0]:.2e} lse {errs[1][1]:.2e} "
                  f"{'ok' if ok else 'BAD'}")
print("m192 check:", "all ok" if not bad else f"{bad} BAD")
