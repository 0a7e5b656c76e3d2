"""Issue 14, call 111: GPU time (CUDA graphs, copies past L2) of small decode steps against the
split count forced through num_splits, and the read kernel and cuDNN over the same bytes: how
the small step's time depends on the split."""
import math
import sys

import cupy as cp
import numpy as np

sys.path.insert(0, "tools")
from bench_kvcache import _graph_ms, _random_f16, _torch_ms  # noqa: E402

from cuflash import kvcache  # noqa: E402
from cuflash.experiments.readbw import DeviceRead  # noqa: E402

d, G = 128, 4
rng = np.random.default_rng(0)
print("B Hkv S  | us per step: read  cuDNN  auto  | num_splits=1 2 4 8 16 32")
for B, Hkv, S in [(1, 1, 1024), (1, 1, 8192), (1, 8, 1024), (8, 8, 1024)]:
    kv_bytes = 2 * B * Hkv * S * d * 2
    copies = max(1, min(256, math.ceil(256 * 2 ** 20 / kv_bytes)))
    qs = [cp.asarray(rng.standard_normal((B, G * Hkv, 1, d)).astype(np.float16)) for _ in range(4)]
    bufs = [_random_f16(cp, (2, B, Hkv, S, d)) for _ in range(copies)]
    lens = cp.full((B,), S, dtype=cp.int32)
    us = lambda ms: ms * 1e3
    read = us(_graph_ms(cp, [DeviceRead(b.view(cp.uint32).reshape(-1)).launch for b in bufs]))
    cud = us(_torch_ms(qs, [b[0] for b in bufs], [b[1] for b in bufs], "cudnn"))
    cols = []
    for ns in [None, 1, 2, 4, 8, 16, 32]:
        calls = [lambda i=i, b=b: kvcache.attention_with_kvcache(
            qs[i % 4], b[0], b[1], cache_seqlens=lens, num_splits=ns, validate=False)
            for i, b in enumerate(bufs)]
        try:
            cols.append(us(_graph_ms(cp, calls)))
        except Exception as exc:
            print("  ", ns, type(exc).__name__, str(exc)[:80])
            cols.append(float("nan"))
    print(f"{B} {Hkv} {S} | {read:6.2f} {cud:6.2f} {cols[0]:6.2f} | " + " ".join(f"{c:6.2f}" for c in cols[1:]), flush=True)
    del bufs
    cp.get_default_memory_pool().free_all_blocks()
