"""GQA against MHA at the kernel level (ncu's kernel time at locked clocks, DRAM bytes, L2 hit
rate): is the whole-call gap of issue 12 (0.96-0.975 forward non-causal at G = 4) in the kernel?
    ncu --profile-from-start off --metrics ... python .ab/gqa_ncu.py"""
import cupy as cp
import numpy as np

import cuflash

rng = np.random.default_rng(0)
rand = lambda *s: cp.asarray(rng.standard_normal(s).astype(np.float16))
Hq, d = 16, 128
for T, passes in ((4096, ("fwd",)), (8192, ("fwd",)), (16384, ("fwd", "bwd"))):
    B = 16384 // T
    q, do = rand(B, Hq, T, d), rand(B, Hq, T, d)
    for G in (1, 4, 8):
        k, v = rand(B, Hq // G, T, d), rand(B, Hq // G, T, d)
        _, res = cuflash.attention(q, k, v, return_residuals=True)
        cuflash.attention_backward(do, res)
        cp.cuda.Device().synchronize()
        cp.cuda.profiler.start()
        for _ in range(2):
            if "fwd" in passes:
                cp.cuda.nvtx.RangePush(f"fwd T{T} G{G}")
                cuflash.attention(q, k, v)
                cp.cuda.nvtx.RangePop()
            if "bwd" in passes:
                cp.cuda.nvtx.RangePush(f"bwd T{T} G{G}")
                cuflash.attention_backward(do, res)
                cp.cuda.nvtx.RangePop()
        cp.cuda.Device().synchronize()
        cp.cuda.profiler.stop()
