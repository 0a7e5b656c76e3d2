"""Issue 14, v92 (call 261): deeper K/V rings for decode steps whose blocks stream many key tiles
alone on their SMs. Arms: the library's tile (16 x 64 x 4 warps, 3 stages where the grid is at
most one block per SM: two 64-key tiles in flight), 16 x 64 x 4 x 4 stages (three in flight) and
16 x 128 x 4 x 3 (two 128-key tiles: twice the bytes in flight), forced through
kvcache.DECODE_TILE (the split rule unchanged). First each forced tile against a float64
reference, then GPU µs per step (CUDA graphs, the cache cycled past L2), arms alternating, two
passes, torch's cuDNN backend in the same process.
    python .ab/ring_ab.py [ARM,...] [BxHkvxS,...] [G]   (G: query heads a kv head, 4 by default)"""
import math
import sys

import cupy as cp
import numpy as np

sys.path.insert(0, "tools")
from bench_kvcache import _graph_ms, _step_inputs, _torch_ms  # noqa: E402

from cuflash import TileConfig, kvcache  # noqa: E402

rng = np.random.default_rng(2)
ARMS = {"auto": None, "64x4st": TileConfig(16, 64, 4, 4, "mma"),
        "128x3st": TileConfig(16, 128, 4, 3, "mma")}
if len(sys.argv) > 1:   # other forced tiles, e.g. 16x128x8x3,16x128x8x2 (v93), each with an
    # optional cap on the split count, @32 (v95: auto@64 is the library's tile, at most 64 splits)
    def _arm(a):
        tile, _, cap = a.partition("@")
        return (None if tile == "auto" else TileConfig(*map(int, tile.split("x")), "mma"),
                int(cap) if cap else None)
    ARMS = {"auto": None, **{a: _arm(a) for a in sys.argv[1].split(",")}}
CELLS = [(1, 1, 8192), (1, 1, 32768), (1, 1, 131072), (1, 8, 32768), (1, 8, 131072),
         (8, 8, 32768), (64, 8, 32768)]
if len(sys.argv) > 2:   # the cells, e.g. 1x1x8192,1x1x32768
    CELLS = [tuple(map(int, c.split("x"))) for c in sys.argv[2].split(",")]
MAX_SPLITS = kvcache.DECODE_MAX_SPLITS
G = int(sys.argv[3]) if len(sys.argv) > 3 else 4   # query heads a kv head (v99: 1, one row a tile)


def force(arm):
    """The arm's tile (None: the library's) and split cap into kvcache's knobs."""
    tile, cap = arm if isinstance(arm, tuple) else (arm, None)
    kvcache.DECODE_TILE = tile
    kvcache.DECODE_MAX_SPLITS = MAX_SPLITS if cap is None else cap


d = 128

for name, arm in ARMS.items():   # correctness: one sequence of 40000 keys, 4 query heads a kv head
    force(arm)
    S, n = 40064, 40000
    q = rng.standard_normal((1, G, 1, d)).astype(np.float16)
    k = rng.standard_normal((1, 1, S, d)).astype(np.float16)
    v = rng.standard_normal((1, 1, S, d)).astype(np.float16)
    out = kvcache.attention_with_kvcache(cp.asarray(q), cp.asarray(k), cp.asarray(v),
                                         cache_seqlens=cp.asarray([n], dtype=cp.int32))
    s = q[0, :, 0].astype(np.float64) @ k[0, 0, :n].astype(np.float64).T / math.sqrt(d)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v[0, 0, :n].astype(np.float64)
    err = float(np.abs(cp.asnumpy(out)[0, :, 0].astype(np.float64) - want).max())
    print(f"check {name}: max |err| {err:.2e}", flush=True)

rows = []
for B, Hkv, S in CELLS:
    copies, qs, bufs, lens = _step_inputs(cp, rng, B, Hkv, S, d, G)
    t = {}
    for rnd in range(2):
        for name in (ARMS if rnd == 0 else reversed(list(ARMS))):
            force(ARMS[name])
            calls = [lambda i=i, b=b: kvcache.attention_with_kvcache(
                qs[i % len(qs)], b[0], b[1], cache_seqlens=lens, validate=False)
                for i, b in enumerate(bufs)]
            t.setdefault(name, []).append(min(_graph_ms(cp, calls) for _ in range(2)) * 1e3)
    tc = _torch_ms(qs, [b[0] for b in bufs], [b[1] for b in bufs], "cudnn") * 1e3
    best = {k: min(v) for k, v in t.items()}
    row = (f"{B}x{Hkv} S={S:6d}  " + "  ".join(f"{k} {v:7.2f}" for k, v in best.items()) +
           f"  cuDNN {tc:7.2f}  " + "  ".join(f"{k}/auto {best[k] / best['auto']:.3f}"
                                             for k in list(ARMS)[1:]) +
           "  " + "  ".join(f"cuDNN/{k} {tc / best[k]:.3f}" for k in ARMS))
    rows.append(row)
    print(row, flush=True)
    del bufs
    cp.get_default_memory_pool().free_all_blocks()
force(None)
print("=== µs per step, least of two passes; x/auto < 1: x faster; cuDNN/x > 1: x faster")
print("\n".join(rows))
