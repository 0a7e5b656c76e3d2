"""Issue 14, v91 (calls 258-259): split-KV merged in thread-block clusters against the merge through L2.
First a check of both arms against a float64 reference (fp16, d = 128, contiguous and paged,
odd lengths), then GPU µs per decode step (CUDA graphs, the cache cycled past L2) of
kvcache.DECODE_CLUSTER = 8 ("cl") and 1 ("l2") alternating, two passes, and torch's cuDNN
backend in the same process (bench_kvcache._torch_ms; calls 258-259 ran an earlier form of
this script that timed cuDNN with its own copy of that code).  python .ab/cluster_ab.py [BxHkvxS,...]"""
import math
import sys

import cupy as cp
import numpy as np

sys.path.insert(0, "tools")
from bench_kvcache import _graph_ms, _step_inputs, _torch_ms  # noqa: E402

from cuflash import kvcache  # noqa: E402

rng = np.random.default_rng(1)


def ref(q, k, v, lens):   # float64, GQA by head groups, one query per sequence at the end
    q, k, v = (cp.asnumpy(x).astype(np.float64) for x in (q, k, v))
    B, Hq, Tq, d = q.shape
    G = Hq // k.shape[1]
    out = np.zeros_like(q)
    for b in range(B):
        n = int(lens[b])
        if n < Tq:
            continue
        for h in range(Hq):
            s = q[b, h] @ k[b, h // G, :n].T / math.sqrt(d)
            s = np.where(np.arange(n)[None, :] <= np.arange(Tq)[:, None] + n - Tq, s, -np.inf)
            p = np.exp(s - s.max(-1, keepdims=True))
            out[b, h] = (p / p.sum(-1, keepdims=True)) @ v[b, h // G, :n]
    return out


worst = {}
for arm in (8, 1):
    kvcache.DECODE_CLUSTER = arm
    for B, Hkv, G, S, lens, Tq in [(1, 1, 4, 1024, [1024], 1), (2, 2, 4, 8192, [8191, 77], 1),
                                   (3, 1, 1, 3000, [3000, 1, 0], 2), (1, 1, 8, 40000, [39999], 1)]:
        d = 128
        q = cp.asarray(rng.standard_normal((B, Hkv * G, Tq, d)).astype(np.float16))
        k = cp.asarray(rng.standard_normal((B, Hkv, S, d)).astype(np.float16))
        v = cp.asarray(rng.standard_normal((B, Hkv, S, d)).astype(np.float16))
        L = cp.asarray(np.array(lens, np.int32))
        out = kvcache.attention_with_kvcache(q, k, v, cache_seqlens=L)
        want = ref(q, k, v, lens)
        keep = np.array(lens) >= Tq
        err = float(np.abs(cp.asnumpy(out).astype(np.float64) - want)[keep].max())
        worst[(arm, B, Hkv, G, S)] = err
        print(f"check cluster<={arm} B={B} Hkv={Hkv} G={G} S={S} Tq={Tq}: max |err| {err:.2e}",
              flush=True)

d, G = 128, 4
rows = []
CELLS = [(1, 1, 1024), (1, 1, 8192), (1, 1, 32768), (1, 1, 131072), (1, 8, 1024),
         (1, 8, 8192), (4, 8, 1024), (8, 8, 1024), (64, 8, 1024)]
if len(sys.argv) > 1:   # e.g. 1x1x1024,1x8x1024
    CELLS = [tuple(map(int, c.split("x"))) for c in sys.argv[1].split(",")]
for B, Hkv, S in CELLS:
    copies, qs, bufs, lens = _step_inputs(cp, rng, B, Hkv, S, d, G)
    t = {}
    for rnd in range(2):
        for arm in ((8, 1) if rnd == 0 else (1, 8)):
            kvcache.DECODE_CLUSTER = arm
            calls = [lambda i=i, b=b: kvcache.attention_with_kvcache(
                qs[i % len(qs)], b[0], b[1], cache_seqlens=lens, validate=False)
                for i, b in enumerate(bufs)]
            t.setdefault(arm, []).append(min(_graph_ms(cp, calls) for _ in range(2)) * 1e3)
    tc = _torch_ms(qs, [b[0] for b in bufs], [b[1] for b in bufs], "cudnn") * 1e3
    splits = kvcache._decode_split(B * Hkv, S // 64, cp.cuda.Device().attributes["MultiProcessorCount"])[0]
    row = (f"{B}x{Hkv} S={S:6d} splits={splits:3d}  cl {t[8][0]:7.2f} {t[8][1]:7.2f}  "
           f"l2 {t[1][0]:7.2f} {t[1][1]:7.2f}  cl/l2 {min(t[8]) / min(t[1]):.3f}  cuDNN {tc:7.2f}  "
           f"cuDNN/cl {tc / min(t[8]):.3f}  cuDNN/l2 {tc / min(t[1]):.3f}")
    rows.append(row)
    print(row, flush=True)
    del bufs
    cp.get_default_memory_pool().free_all_blocks()
print("=== µs per step (two passes each), splits from _decode_split, cuDNN/x > 1: x faster")
print("\n".join(rows))
