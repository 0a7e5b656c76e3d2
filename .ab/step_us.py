"""Issue 14 (call 121): GPU µs per decode step (CUDA graphs, the cache cycled through copies
past L2) of the tree imported (PYTHONPATH), auto splits, for A/B of small kernel changes where
the TB/s table's two decimals are too coarse.  python .ab/step_us.py LABEL"""
import sys

import cupy as cp
import numpy as np

sys.path.insert(0, "tools")
from bench_kvcache import _graph_ms, _step_inputs  # noqa: E402

from cuflash import kvcache  # noqa: E402

d, G = 128, 4
rng = np.random.default_rng(0)
out = []
for B, Hkv, S in [(1, 1, 1024), (1, 1, 8192), (1, 1, 32768), (1, 1, 131072), (1, 8, 1024), (1, 8, 8192),
                  (8, 8, 1024), (64, 8, 1024)]:
    copies, qs, bufs, lens = _step_inputs(cp, rng, B, Hkv, S, d, G)
    calls = [lambda i=i, b=b: kvcache.attention_with_kvcache(
        qs[i % len(qs)], b[0], b[1], cache_seqlens=lens, validate=False) for i, b in enumerate(bufs)]
    t = min(_graph_ms(cp, calls) for _ in range(3)) * 1e3
    out.append(f"{B}x{Hkv} S={S} {t:.2f}")
    del bufs
    cp.get_default_memory_pool().free_all_blocks()
print(sys.argv[1], " | ".join(out), flush=True)
