"""Decode steps over pages of P tokens with forced 16-row tiles (arms KEYSxWARPS), at d = 128
float16, Hq = 4·Hkv (the GQA fold: 16-row tiles), both arms in one process. A page pool made
from the timed cell's contiguous copies (each sequence's pages in a shuffled order), GPU µs per
step from CUDA graphs, arms alternating, two passes; each arm first checked against a float64
reference.   python .ab/pages_ab.py P [KEYSxWARPS,KEYSxWARPS]
- v94 (session 52, call 264): `pages_ab.py 32 32x1,32x2`, one warp over each 32-key tile (the
  rule before 47f3aaf) against two warps of 16 keys each.
- v101 (prepared in session 53, `.ab/pages101.patch`): `pages_ab.py 16` and `32` (the default
  arms: a page's keys, P / 16 warps, against the 64-key tile of 4 warps, each staging its own 16
  keys from its own page; the 64-key arm needs the patch)."""
import math
import sys

import cupy as cp
import numpy as np

sys.path.insert(0, "tools")
from bench_kvcache import _graph_ms, _step_inputs  # noqa: E402

from cuflash import TileConfig, kvcache  # noqa: E402

P, d, G = int(sys.argv[1]) if len(sys.argv) > 1 else 32, 128, 4
rng = np.random.default_rng(5)


def paged(x, perm):
    """(B, Hkv, S, d) -> a pool (B·S/P, Hkv, P, d) whose page perm[b, j] is page j of sequence b."""
    B, H, S, D = x.shape
    pages = x.reshape(B, H, S // P, P, D).transpose(0, 2, 1, 3, 4).reshape(B * S // P, H, P, D)
    pool = cp.empty_like(pages)
    pool[perm.reshape(-1)] = pages
    return pool


ARMS = {a: tuple(map(int, a.split("x"))) for a in
        (sys.argv[2] if len(sys.argv) > 2 else f"{P}x{P // 16},64x4").split(",")}
FIRST, LAST = list(ARMS)[0], list(ARMS)[-1]
rows = []
for B, Hkv, S in [(1, 1, 8192), (1, 1, 32768), (1, 8, 32768), (8, 8, 8192), (8, 8, 32768),
                  (64, 8, 8192)]:
    copies, qs, bufs, lens = _step_inputs(cp, rng, B, Hkv, S, d, G)
    perm = cp.asarray(rng.permutation(B * S // P).astype(np.int32).reshape(B, S // P))
    pools = [(paged(b[0], perm), paged(b[1], perm)) for b in bufs]
    del bufs
    t = {}
    for rnd in range(2):
        for name in (ARMS if rnd == 0 else reversed(list(ARMS))):
            keys, w = ARMS[name]
            # the stage count the library's split rule gives this grid, the warps of the arm
            kvcache.DECODE_TILE = None
            blocks = B * Hkv
            splits, stages = kvcache._decode_split(blocks, S // P, cp.cuda.Device().attributes[
                "MultiProcessorCount"])
            kvcache.DECODE_TILE = TileConfig(16, keys, w, stages, "mma")
            if rnd == 0 and B == 1 and Hkv == 1:   # correctness, once per arm
                out = kvcache.attention_with_kvcache(qs[0], pools[0][0], pools[0][1],
                                                     cache_seqlens=lens, block_table=perm)
                k = cp.asnumpy(pools[0][0][cp.asnumpy(perm)[0]]).transpose(1, 0, 2, 3)
                v = cp.asnumpy(pools[0][1][cp.asnumpy(perm)[0]]).transpose(1, 0, 2, 3)
                k, v = (a.reshape(Hkv, S, d).astype(np.float64) for a in (k, v))
                q = cp.asnumpy(qs[0])[0, :, 0].astype(np.float64)
                s = q @ k[0].T / math.sqrt(d)
                p = np.exp(s - s.max(-1, keepdims=True))
                want = (p / p.sum(-1, keepdims=True)) @ v[0]
                err = float(np.abs(cp.asnumpy(out)[0, :, 0].astype(np.float64) - want).max())
                print(f"check {name} S={S}: max |err| {err:.2e}", flush=True)
            calls = [lambda i=i, b=b: kvcache.attention_with_kvcache(
                qs[i % len(qs)], b[0], b[1], cache_seqlens=lens, block_table=perm,
                validate=False) for i, b in enumerate(pools)]
            t.setdefault(name, []).append(min(_graph_ms(cp, calls) for _ in range(2)) * 1e3)
    best = {k: min(v) for k, v in t.items()}
    row = (f"{B}x{Hkv} S={S:6d} splits={splits} stages={stages}  " +
           "  ".join(f"{k} {v:7.2f}" for k, v in best.items()) +
           f"  {LAST}/{FIRST} {best[LAST] / best[FIRST]:.3f}")
    rows.append(row)
    print(row, flush=True)
    del pools
    cp.get_default_memory_pool().free_all_blocks()
kvcache.DECODE_TILE = None
print(f"=== paged ({P} tokens a page), µs per step, least of two passes; {LAST}/{FIRST} < 1: "
      f"{LAST} faster")
print("\n".join(rows))
