"""Probe (session 46): the 16-bit ws forward on 128 x 176 tiles (FlashAttention-3's d = 128
non-causal tile; .ab/arms/n176: TileConfig takes multiples of 16, Wgmma<176, T> generated).
Its output and lse against a float64 oracle, beside the default tile's, at odd shapes, for the
cuflash imported from PYTHONPATH. Any probe tile the same way (session 49):
`n176_check.py D BMxBNxWARPSxSTAGES`, e.g. `64 192x128x16x2` (.ab/m192_probe.patch); with no
arguments, the 128 x 176 check of call 238."""
import sys

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


D, TILE = (int(sys.argv[1]), sys.argv[2]) if len(sys.argv) > 2 else (128, "128x176x12x2")
PROBE = TileConfig(*map(int, TILE.split("x")), "wgmma")

bad = 0
for dt in (np.float16, bfloat16):
    for (T, S) in ((1000, 1000), (700, 1333), (333, 2900)):
        for causal in (False, True):
            rng = np.random.default_rng(T + S)
            q, k, v = (rng.standard_normal((2, 3, n, D)).astype(dt) for n in (T, S, S))
            o_ref, lse_ref = oracle(q, k, v, causal)
            errs = []
            for tile in (None, PROBE):
                o, lse = cuflash.attention(*(cp.asarray(x) for x in (q, k, v)), causal=causal,
                                           tile=tile, return_lse=True)
                o = cp.asnumpy(o).astype(np.float64)
                lse = cp.asnumpy(lse).astype(np.float64)
                errs.append((np.abs(o - o_ref).max(), np.abs(lse - lse_ref).max()))
            ok = errs[1][0] <= 2 * errs[0][0] + 1e-6 and errs[1][1] <= 2 * errs[0][1] + 1e-6
            bad += not ok
            print(f"{dt.__name__:9} T={T} S={S} causal={causal}: default o {errs[0][0]:.2e} "
                  f"lse {errs[0][1]:.2e} | {TILE} o {errs[1][0]:.2e} lse {errs[1][1]:.2e} "
                  f"{'ok' if ok else 'BAD'}")
print(f"d = {D}, {TILE} check:", "all ok" if not bad else f"{bad} BAD")
