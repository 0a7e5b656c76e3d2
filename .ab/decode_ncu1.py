"""One decode step at B = 1, Hkv = 1, Hq = 4, S = 32768 (float16, d = 128, contiguous; the library's
rule: 128 splits merged through L2), where cuflash reads 0.83 of cuDNN (calls 258, 261): for ncu
(issue 14, NOTES v92). With the argument `torch`, torch's cuDNN backend on the same step instead.
ncu --kernel-name regex:mma_fwd --launch-skip 1 --launch-count 1 --set full python3 .ab/decode_ncu1.py"""
import sys

import cupy as cp

from cuflash import kvcache

B, Hkv, S, d = 1, 1, 32768, 128
kv = cp.random.standard_normal((2, B, Hkv, S, d), dtype=cp.float32).astype(cp.float16)
q = cp.random.standard_normal((B, 4 * Hkv, 1, d), dtype=cp.float32).astype(cp.float16)
lens = cp.full((B,), S, dtype=cp.int32)
if sys.argv[1:] == ["torch"]:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    tq, tk, tv = (torch.from_dlpack(x) for x in (q, kv[0], kv[1]))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for _ in range(3):
            F.scaled_dot_product_attention(tq, tk, tv, enable_gqa=True)
    torch.cuda.synchronize()
else:
    for _ in range(3):
        kvcache.attention_with_kvcache(q, kv[0], kv[1], cache_seqlens=lens, validate=False)
    cp.cuda.Device().synchronize()
print("done")
