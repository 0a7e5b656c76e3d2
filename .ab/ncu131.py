"""Issue 13 / 11 evidence (call 131): cuflash's kernels beside cuDNN's on the cells where cuflash
is furthest behind. Profiled (between profiler.start/stop), each once after a warm-up:
  A  forward  fp16 d=64  T=8192 B=2 H=32 non-causal: cuflash, then cuDNN (torch sdpa)
  B  forward  fp16 d=128 T=8192 B=2 H=16 non-causal: cuflash, then cuDNN
  C  backward fp16 d=64  T=8192 B=2 H=32 non-causal: cuflash (dK/dV, dQ, preprocessing), then cuDNN
  D  forward  fp16 d=128 T=32768 B=1 H=16 causal, window 4096 (issue 11's window cell), cuflash
Run under ncu --profile-from-start off --set full -o REP python .ab/ncu131.py"""
import cupy as cp
import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

import cuflash

rng = np.random.default_rng(0)
rand = lambda *s: cp.asarray(rng.standard_normal(s).astype(np.float16))


def cells():
    for tag, B, H, T, d in (("A", 2, 32, 8192, 64), ("B", 2, 16, 8192, 128)):
        q, k, v = (rand(B, H, T, d) for _ in range(3))
        tq, tk, tv = (torch.from_dlpack(x) for x in (q, k, v))
        yield lambda q=q, k=k, v=v: cuflash.attention(q, k, v)
        def cud(tq=tq, tk=tk, tv=tv):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                F.scaled_dot_product_attention(tq, tk, tv)
        yield cud
    B, H, T, d = 2, 32, 8192, 64
    q, k, v, dout = (rand(B, H, T, d) for _ in range(4))
    out, res = cuflash.attention(q, k, v, return_residuals=True)
    yield lambda: cuflash.attention_backward(dout, res)
    leaves = tuple(torch.from_dlpack(x).requires_grad_(True) for x in (q, k, v))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        tout = F.scaled_dot_product_attention(*leaves)
    tdo = torch.from_dlpack(dout)
    def cudb():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            torch.autograd.grad(tout, leaves, tdo, retain_graph=True)
    yield cudb
    q, k, v = (rand(1, 16, 32768, 128) for _ in range(3))
    yield lambda: cuflash.attention(q, k, v, causal=True, window=(4095, 0))


fns = list(cells())
for f in fns:
    f()
cp.cuda.Device().synchronize(); torch.cuda.synchronize()
cp.cuda.profiler.start()
for f in fns:
    f()
cp.cuda.Device().synchronize(); torch.cuda.synchronize()
cp.cuda.profiler.stop()
