"""Host-side cost of one attention call: what a short kernel's timing also contains.

    python3 tests/host_overhead.py      # on a GPU machine; prints microseconds per call

cupyx.profiler.benchmark (the experiments' timer) records a CUDA event, calls the function and
records another: when the Python work before the launch takes longer than nothing, the GPU idles
inside the timed interval. This prints, for a tiny problem (the GPU work is negligible), the
wall time per call of cuflash's forward and backward, and of torch SDPA's flash backend when
torch is importable.
"""
import time

import numpy as np

import cuflash
from cuflash._xp import cupy_module


def per_call_us(fn, n=300):
    for _ in range(20):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return (time.perf_counter() - t0) / n * 1e6


def sync():
    cupy_module().cuda.Device().synchronize()


def main():
    cp = cupy_module()
    rng = np.random.default_rng(0)
    q, k, v, do = (cp.asarray(rng.standard_normal((1, 2, 128, 64)).astype(np.float16))
                   for _ in range(4))
    out, res = cuflash.attention(q, k, v, return_residuals=True)
    backward_us = per_call_us(lambda: cuflash.attention_backward(do, res))
    print(f"cuflash forward:  {per_call_us(lambda: cuflash.attention(q, k, v)):7.1f} us per call")
    print(f"cuflash backward: {backward_us:7.1f} us per call")
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        print("torch not importable: no reference")
        return
    tq = torch.from_dlpack(q)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        us = per_call_us(lambda: F.scaled_dot_product_attention(tq, tq, tq))
    print(f"torch SDPA flash forward: {us:7.1f} us per call")


if __name__ == "__main__":
    main()
