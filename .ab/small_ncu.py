"""Issue 14, call 107: kernel durations (ncu gpu__time_duration, cold L2) of small decode steps,
the read kernel over the same K/V and torch's cuDNN SDPA: how much of a small step's graph time
(8.7 us at B·Hkv = 1, S = 1k in call 105) is the kernel itself. Run under ncu --clock-control none."""
import cupy as cp
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from cuflash import kvcache
from cuflash.experiments.readbw import DeviceRead

d = 128
for B, Hkv, S in [(1, 1, 1024), (1, 8, 1024), (1, 1, 8192), (8, 8, 1024)]:
    kv = cp.random.standard_normal((2, B, Hkv, S, d), dtype=cp.float32).astype(cp.float16)
    q = cp.random.standard_normal((B, 4 * Hkv, 1, d), dtype=cp.float32).astype(cp.float16)
    lens = cp.full((B,), S, dtype=cp.int32)
    reader = DeviceRead(kv.view(cp.uint32).reshape(-1))
    tq, tk, tv = (torch.as_tensor(x, device="cuda") for x in (q, kv[0], kv[1]))
    cp.cuda.Device().synchronize()
    print(f"== case B={B} Hkv={Hkv} S={S}", flush=True)
    torch.cuda.nvtx.range_push(f"case B={B} Hkv={Hkv} S={S}")
    for _ in range(2):
        kvcache.attention_with_kvcache(q, kv[0], kv[1], cache_seqlens=lens, validate=False)
        reader.launch()
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            F.scaled_dot_product_attention(tq, tk, tv, enable_gqa=True)
    cp.cuda.Device().synchronize()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
print("done")
