"""NOTES v98, v101: the key-split decode kernels with warp-local staging, small launches for
compute-sanitizer racecheck and memcheck (run once without it first, to compile): float16,
d = 128, the library's 16 x 64 x 4 tile (four warps split each tile's keys), a contiguous cache
and pages of 64, 32 and 16 (v101: each warp's 16 keys from its own page), an append (tiles mixing
cached and new keys: load_rows), split 3 and unsplit; every result checked against float64.
python3 .ab/warp_race.py"""
import math

import cupy as cp
import numpy as np

from cuflash import kvcache

rng = np.random.default_rng(5)
B, Hkv, G, d = 2, 2, 4, 128
lens = np.array([70, 129], np.int32)
cap = 192
worst = 0.0
for layout, page in (("contiguous", 64), ("paged", 64), ("paged", 32), ("paged", 16)):
    n_pages = cap // page
    for splits in (None, 3):
        k = rng.standard_normal((B, Hkv, cap, d)).astype(np.float16)
        v = rng.standard_normal((B, Hkv, cap, d)).astype(np.float16)
        q = rng.standard_normal((B, G * Hkv, 1, d)).astype(np.float16)
        kn = rng.standard_normal((B, Hkv, 2, d)).astype(np.float16)
        vn = rng.standard_normal((B, Hkv, 2, d)).astype(np.float16)
        if layout == "paged":
            table = np.arange(B * n_pages, dtype=np.int32)[::-1].reshape(B, n_pages).copy()
            kp = np.empty((B * n_pages, Hkv, page, d), np.float16); vp = np.empty_like(kp)
            for b in range(B):
                for i in range(n_pages):
                    kp[table[b, i]] = k[b, :, i * page:(i + 1) * page]
                    vp[table[b, i]] = v[b, :, i * page:(i + 1) * page]
            kc, vc, bt = cp.asarray(kp), cp.asarray(vp), cp.asarray(table)
        else:
            kc, vc, bt = cp.asarray(k), cp.asarray(v), None
        out = cp.asnumpy(kvcache.attention_with_kvcache(
            cp.asarray(q), kc, vc, cache_seqlens=cp.asarray(lens), block_table=bt,
            k_new=cp.asarray(kn), v_new=cp.asarray(vn), num_splits=splits))
        for b in range(B):
            n = lens[b]
            for h in range(G * Hkv):
                hk = h // G   # query head h reads kv head h // G
                kk = np.concatenate([k[b, hk, :n], kn[b, hk]]).astype(np.float64)
                vv = np.concatenate([v[b, hk, :n], vn[b, hk]]).astype(np.float64)
                s = kk @ q[b, h, 0].astype(np.float64) / math.sqrt(d)
                p = np.exp(s - s.max())
                want = p @ vv / p.sum()
                worst = max(worst, float(np.abs(out[b, h, 0] - want).max()))
        print(f"{layout} {page} splits={splits}: max |err| so far {worst:.2e}", flush=True)
assert worst < 2e-3, worst
print("ok")
