"""The read bandwidth of a device, measured, not assumed: a read-only pass over one array (the
``read_ceiling`` method of KV-cache experiments, ``cuflash.experiments.decode``).

Every form returns the XOR of the array's 32-bit words, so a pass that skipped bytes would give
another number (``tests/test_kv_cache_experiments.py`` checks the GPU's against NumPy's):

* GPU: :data:`KERNEL_SOURCE`, one CUDA kernel (NVRTC through ``cupy.RawKernel``): threads read
  the array in 16-byte words, grid-stride, four loads in flight per thread, through the
  read-only path (``__ldg``), and XOR them; each block writes one 32-bit word, so the kernel
  reads every byte once and writes 4 bytes per block (8 blocks of 256 threads per SM at most).
  Its time over the array's bytes is the read ceiling a decode kernel is measured against.
* CPU: NumPy's XOR reduction over the 32-bit words (the twin: a smoke run of the same path, a
  ceiling of NumPy's loop, not of the memory).

The array (:func:`make_array`): random 32-bit words (``uint32``, 1-D), of a byte count that is
a multiple of 16.
"""
from __future__ import annotations

import numpy as np

#: Name of the kernel (and of its NVRTC program).
KERNEL = "cuflash_read_ceiling"
#: Threads per block, and the most blocks per SM launched (8 x 256 = 2048 threads: a full SM).
THREADS = 256
BLOCKS_PER_SM = 8
#: The array is read in words of this many bytes.
WORD = 16

KERNEL_SOURCE = r"""
extern "C" __global__ void __launch_bounds__(256)
cuflash_read_ceiling(const uint4* __restrict__ x, unsigned long long n,
                     unsigned int* __restrict__ out)
{
    // XOR of the n 16-byte words of x: four independent loads per thread in flight.
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int acc = 0u;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const uint4 a = __ldg(x + i);
        const uint4 b = __ldg(x + i + stride);
        const uint4 c = __ldg(x + i + 2 * stride);
        const uint4 d = __ldg(x + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w
             ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        const uint4 a = __ldg(x + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    for (int offset = 16; offset > 0; offset >>= 1)
        acc ^= __shfl_xor_sync(0xffffffffu, acc, offset);
    __shared__ unsigned int warp_acc[32];
    if ((threadIdx.x & 31) == 0) warp_acc[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int r = 0u;
        for (int w = 0; w < (int)((blockDim.x + 31) / 32); ++w) r ^= warp_acc[w];
        out[blockIdx.x] = r;
    }
}
"""


def _check(x) -> None:
    if x.ndim != 1 or x.dtype != np.uint32:
        raise TypeError(f"the array read must be 1-D uint32 (made by make_array), got "
                        f"{x.dtype} of shape {tuple(x.shape)}")
    if x.nbytes % WORD:
        raise ValueError(f"the array read has {x.nbytes} bytes; it must be a multiple of {WORD} "
                         f"(read in 16-byte words)")


def make_array(nbytes: int, xp=np, seed: int = 0):
    """A 1-D uint32 array of ``nbytes`` bytes of random words on module ``xp`` (every byte
    written, so no page of it is a shared zero page). ValueError unless ``nbytes`` is a
    multiple of 16."""
    if not isinstance(nbytes, (int, np.integer)) or nbytes < 0 or nbytes % WORD:
        raise ValueError(f"nbytes={nbytes!r} must be an int >= 0 and a multiple of {WORD}")
    rng = xp.random.default_rng(seed)
    return rng.standard_normal(int(nbytes) // 4, dtype=xp.float32).view(xp.uint32)


def grid_size(nbytes: int, sm_count: int) -> int:
    """Blocks launched for an array of ``nbytes``: enough for one word per thread, at most
    BLOCKS_PER_SM per SM (the grid-stride loop does the rest); at least 1."""
    words = nbytes // WORD
    return max(1, min(-(-words // THREADS), BLOCKS_PER_SM * sm_count))


class DeviceRead:
    """The GPU pass over one CuPy array: ``launch()`` enqueues the kernel and returns the
    per-block words (a CuPy array); ``xor(result)`` folds them into the XOR of the array."""

    def __init__(self, x):
        import cupy as cp
        _check(x)
        self.cp, self.x = cp, x
        self.kernel = cp.RawKernel(KERNEL_SOURCE, KERNEL, backend="nvrtc")
        sms = cp.cuda.Device().attributes["MultiProcessorCount"]
        self.grid = grid_size(x.nbytes, sms)
        self.out = cp.zeros(self.grid, dtype=cp.uint32)     # made once: no allocation per pass
        self.words = np.uint64(x.nbytes // WORD)

    def launch(self):
        self.kernel((self.grid,), (THREADS,), (self.x, self.words, self.out))
        return self.out

    @staticmethod
    def xor(result) -> int:
        host = result.get() if hasattr(result, "get") else np.asarray(result)
        return int(np.bitwise_xor.reduce(host, initial=np.uint32(0)))


def host_xor(x) -> int:
    """The CPU pass: XOR of a NumPy array's 32-bit words."""
    _check(x)
    return int(np.bitwise_xor.reduce(x, initial=np.uint32(0)))


def read_xor(x) -> int:
    """XOR of the 32-bit words of ``x`` (NumPy: the CPU pass; CuPy: the kernel, then the blocks'
    words folded on the host)."""
    if isinstance(x, np.ndarray):
        return host_xor(x)
    reader = DeviceRead(x)
    return reader.xor(reader.launch())


__all__ = ["KERNEL", "KERNEL_SOURCE", "make_array", "grid_size", "DeviceRead", "host_xor",
           "read_xor"]
