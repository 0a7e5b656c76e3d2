"""GQA backward speed against the ranks per group of the dK/dV kernels (cuflash/gpu/ops.py,
_group_ranks): r = 1 (one block walks the whole group), the rule's choice, and r = G (one block
per query head), beside MHA (G = 1), FlashAttention's shapes (batch·T = 16384, 16 query heads,
d = 128, causal, float16). Backward TFLOP/s (2.5 × 4·B·H·T²·d / 2), median of 15 calls between
CUDA events. NOTES.md v8.

    python3 tools/bench_gqa_ranks.py
"""
import statistics, cupy as cp, numpy as np, cuflash
from cuflash.gpu import ops
rng = np.random.default_rng(0)
def t(fn, reps=15):
    for _ in range(3): fn()
    out = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event(); a.record(); fn(); b.record(); b.synchronize()
        out.append(cp.cuda.get_elapsed_time(a, b))
    return statistics.median(out)
Hq, d = 16, 128
for T in (2048, 4096, 8192, 16384):
    B = 16384 // T
    flops = 2.5 * 4.0 * B * Hq * T * T * d * 0.5
    q, do = (cp.asarray(rng.standard_normal((B, Hq, T, d)).astype(np.float16)) for _ in range(2))
    row = [f"T={T:6d}"]
    for G in (1, 4, 8, 16):
        k, v = (cp.asarray(rng.standard_normal((B, Hq // G, T, d)).astype(np.float16)) for _ in range(2))
        out, res = cuflash.attention(q, k, v, causal=True, return_residuals=True)
        for ranks in ((None,) if G == 1 else (1, None, G)):
            ops._GROUP_RANKS = ranks
            auto = ops._group_ranks(G, B * (Hq // G) * ((T + 63) // 64), 0)
            ms = t(lambda: cuflash.attention_backward(do, res))
            row.append(f"G{G}/r{ranks if ranks else 'auto=' + str(auto)}:{flops / ms / 1e9:.0f}")
        ops._GROUP_RANKS = None
    print("  ".join(row), flush=True)
