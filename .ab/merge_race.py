"""NOTES v104: lone split steps whose merge stages every split in one round in launch-sized
shared memory (ops.merge_room_bytes), small enough for compute-sanitizer racecheck and memcheck
(run once without it first, to compile): float16, d = 128, one sequence, one kv head, GQA folds of
4 and 8 heads and one head, 64 and 40 splits; every result checked against float64.
python3 .ab/merge_race.py"""
import math

import cupy as cp
import numpy as np

from cuflash import kvcache

rng = np.random.default_rng(7)
d, n = 128, 8187
worst = 0.0
for G in (4, 8, 1):
    for splits in (64, 40):
        q = rng.standard_normal((1, G, 1, d)).astype(np.float16)
        k = rng.standard_normal((1, 1, n + 5, d)).astype(np.float16)
        v = rng.standard_normal((1, 1, n + 5, d)).astype(np.float16)
        out = kvcache.attention_with_kvcache(cp.asarray(q), cp.asarray(k), cp.asarray(v),
                                             cache_seqlens=cp.asarray([n], dtype=cp.int32),
                                             num_splits=splits)
        s = q[0, :, 0].astype(np.float64) @ k[0, 0, :n].astype(np.float64).T / math.sqrt(d)
        p = np.exp(s - s.max(-1, keepdims=True))
        want = (p / p.sum(-1, keepdims=True)) @ v[0, 0, :n].astype(np.float64)
        err = float(np.abs(cp.asnumpy(out)[0, :, 0].astype(np.float64) - want).max())
        worst = max(worst, err)
        print(f"G={G} splits={splits}: max |err| {err:.2e}", flush=True)
        assert err < 2e-3, err
print("ok", f"worst {worst:.2e}")
