"""Where the host time of a small cuflash call goes: cProfile over many forward and backward
calls of a tiny problem on the GPU (the kernels take a few microseconds, so the profile is the
Python path), then the top functions by own time.

    python tools/host_profile.py [--calls 500] [--top 25]
"""
from __future__ import annotations

import sys

import argparse
import cProfile
import pstats
import time


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args(argv)
    import cupy as cp
    import numpy as np

    import cuflash
    rng = np.random.default_rng(0)
    q, k, v, do = (cp.asarray(rng.standard_normal((1, 2, 64, 64)).astype(np.float16))
                   for _ in range(4))
    out, res = cuflash.attention(q, k, v, causal=True, return_residuals=True)
    fwd = lambda: cuflash.attention(q, k, v, causal=True)
    bwd = lambda: cuflash.attention_backward(do, res)
    for name, fn in (("forward", fwd), ("backward", bwd)):
        for _ in range(20):
            fn()
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for _ in range(a.calls):
            fn()
        cp.cuda.Device().synchronize()
        print(f"{name}: {(time.perf_counter() - t0) / a.calls * 1e6:.1f} µs per call (no sync)")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(a.calls):
            fn()
        prof.disable()
        cp.cuda.Device().synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(a.top)


if __name__ == "__main__":
    import gpu_tool  # noqa: E402  (this folder: the script's own)
    sys.exit(gpu_tool.run(main))
