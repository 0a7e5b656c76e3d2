"""The packed-kernel probes' shared case (NOTES v21, v23; .ab/packed_ncu.py, packed_probe.py,
packed_probe2.py): 16 equal sequences of 4096 tokens, Hq = 16, d = 128, float16, causal forward,
run three ways: the dense kernel on a (B, H, T, d) copy ("dense"), the packed arrays' view through
the dense kernel ("view") and the packed kernel ("packed")."""
import sys

import cupy as cp
import numpy as np

import cuflash
from cuflash.gpu import build

HQ, D, N, L = 16, 128, 16, 4096


def rewrite_packed_source(pairs):
    """Have NVRTC compile every packed kernel with each (old, new) of `pairs` replaced in its
    source (each old text exactly once)."""
    source = build.source

    def rewritten(spec):
        src = source(spec)
        if spec.variant.packed:
            for old, new in pairs:
                assert src.count(old) == 1, old
                src = src.replace(old, new)
        return src

    build.source = rewritten


def runs(keys="seqlens"):
    """name -> call of the three runs. keys: how the packed call gets its offsets: "seqlens" (a
    cuflash.SeqLens of one array), "same" (one array twice, both max_seqlen) or "copy" (a copy
    of it for the keys: the general packed kernels)."""
    rng = np.random.default_rng(0)
    r = lambda shape: cp.asarray(rng.standard_normal(shape).astype(np.float16))
    q, k, v = (r((N * L, HQ, D)) for _ in range(3))
    view = lambda x: x.reshape(N, L, HQ, D).transpose(0, 2, 1, 3)
    dense = [view(x).copy() for x in (q, k, v)]
    cu = cp.asarray(np.arange(0, N * L + 1, L).astype(np.int32))
    if keys == "seqlens":
        lens = cuflash.SeqLens(cu)
        packed = lambda: cuflash.attention_varlen(q, k, v, lens, causal=True)
    else:
        cu_k = cu if keys == "same" else cu.copy()
        packed = lambda: cuflash.attention_varlen(q, k, v, cu, cu_k, max_seqlen_q=L,
                                                  max_seqlen_k=L, causal=True)
    return {"dense": lambda: cuflash.attention(*dense, causal=True),
            "view": lambda: cuflash.attention(view(q), view(k), view(v), causal=True),
            "packed": lambda: view(packed())}


def check(fns, label):
    """The packed output against the dense one (max |difference|, to stderr)."""
    ref, out = fns["dense"](), fns["packed"]()
    err = float(cp.abs(out.astype(cp.float32) - ref.astype(cp.float32)).max())
    print(f"{label}: packed vs dense max|diff| {err:.3g}", file=sys.stderr)


def profile(fns, times=1):
    """Each run once to warm up, then `times` rounds of all of them inside the profiler range
    (ncu --profile-from-start off)."""
    for f in fns.values():
        f()
    cp.cuda.Device().synchronize()
    cp.cuda.profiler.start()
    for _ in range(times):
        for f in fns.values():
            f()
    cp.cuda.Device().synchronize()
    cp.cuda.profiler.stop()
