"""float32's backward of precision 'tf32' on the 16-bit kernels (tile family
``tile.F16_SCALED``, 'wgmma_f16s'; NOTES.md v70-v71).

'tf32' computes each product from operands of 11 significant bits with float32 sums, and so do
the 16-bit kernels. What float16 lacks is TF32's exponent range. One power of two per tensor
gives each tensor the range it needs: the kernels run unchanged on copies

    q~ = f16(q·a), k~ = f16(k·b), v~ = f16(v·e), out~ = f16(out·e), dout~ = f16(dout·c)

with max |q~|, max |k~| in [2^7, 2^8) and max |v~|, max |dout~| in [2^2, 2^3) (``TOPS``), and
softmax scale scale' = scale / (a·b), so that the logits, P and lse are the float32 problem's.
Then dP~ = c·e·dP, D~ = rowsum(dout~ ∘ out~) = c·e·D and dS~ = c·e·dS, and the kernels write
float32 gradients (params.cuh, G) times their factors (``Factors``):

    dq = Σ_j dS~_ij k~_j · scale'·a / (c·e),   dk = Σ_i dS~_ijᵀ q~_i · scale'·b / (c·e),
    dv = Σ_i P_ijᵀ dout~_i / c.

Range: |dP~| ≤ d·2^6 and |dS~| ≤ 2^14 at d ≤ 128, far below float16's 65504, and the sums are
float32. An entry below 2^-22 of its tensor's largest (q, k; 2^-17 for v, out and dout) is a
float16 subnormal and keeps fewer than 11 significant bits: where a tensor's entries span more
than that, 'tf32''s x1 kernels (per-row scales) or 'highest' keep them (README, precision).
A zero or non-finite maximum takes the factor 1 (NaN and inf propagate as in the other paths).

``scales`` and ``copy`` are the rule in NumPy (the tests hold the GPU path to it); ``cast`` runs
it on CuPy arrays: one max reduction per tensor, one host read of the four, one scaled copy per
tensor.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import device
from .._xp import cupy_module, is_cupy_array

#: max |x~| of each copy in [2^(top - 1), 2^top)
TOPS = {"q": 8, "k": 8, "v": 3, "dout": 3}
#: powers of two a factor may take (float32 normal range, with room for the largest entry)
_EXP_RANGE = (-120, 120)


def power_of_two(m: float, top: int) -> float:
    """2^e with m·2^e in [2^(top - 1), 2^top) (m > 0, finite; else 1), e within _EXP_RANGE."""
    if not (m > 0 and math.isfinite(m)):
        return 1.0
    _, exp = math.frexp(m)   # m = f·2^exp, f in [0.5, 1)
    return math.ldexp(1.0, min(max(top - exp, _EXP_RANGE[0]), _EXP_RANGE[1]))


@dataclasses.dataclass(frozen=True)
class Factors:
    """The powers of two of one call (a: q, b: k, e: v and out, c: dout) and what follows."""

    a: float
    b: float
    e: float
    c: float
    scale: float   # the problem's softmax scale

    @classmethod
    def of(cls, maxima, scale: float) -> "Factors":
        """From max |x| of q, k, v and dout, in that order (``TOPS``' keys)."""
        return cls(*(power_of_two(float(m), TOPS[n]) for m, n in zip(maxima, TOPS, strict=True)),
                   scale=float(scale))

    @property
    def kernel_scale(self) -> float:
        """scale': the kernels' softmax scale on the copies."""
        return self.scale / (self.a * self.b)

    @property
    def dq(self) -> float:
        return self.kernel_scale * self.a / (self.c * self.e)

    @property
    def dk(self) -> float:
        return self.kernel_scale * self.b / (self.c * self.e)

    @property
    def dv(self) -> float:
        return 1.0 / self.c


def scales(q, k, v, dout, scale: float) -> Factors:
    """The Factors of NumPy (or CuPy: one host read) arrays."""
    xp = cupy_module() if is_cupy_array(q) else np
    m = xp.stack([xp.abs(x).max() if x.size else xp.zeros((), x.dtype)
                  for x in (q, k, v, dout)])
    return Factors.of((m.get() if xp is not np else m).tolist(), scale)


def copy(x, factor: float):
    """float16(x·factor) in NumPy (the reference of ``cast``'s copies)."""
    return (np.asarray(x, np.float32) * np.float32(factor)).astype(np.float16)


_KERNELS: dict = {}


def _cupy_kernels():
    """(absmax reduction, scaled copy) on CuPy, built once."""
    if not _KERNELS:
        import cupy as cp
        _KERNELS["absmax"] = cp.ReductionKernel(
            "float32 x", "float32 y", "fabsf(x)",
            "(a != a || b != b) ? __int_as_float(0x7fc00000) : fmaxf(a, b)",   # NaN stays
            "y = a", "0.f", "cuflash_f16s_absmax")
        _KERNELS["copy"] = cp.ElementwiseKernel(
            "float32 x, float32 s", "float16 y", "y = (half)(x * s)", "cuflash_f16s_copy")
    return _KERNELS["absmax"], _KERNELS["copy"]


def _vectors(x) -> bool:
    """Whether kernels_cu/f16_copy.cuh takes x: non-empty, C-contiguous, 16-byte aligned, a
    multiple of 4 elements (else CuPy's kernels run the rule)."""
    return bool(x.size) and x.flags.c_contiguous and x.data.ptr % 16 == 0 and x.size % 4 == 0


def _launch4(kind: str, x, extra: tuple) -> None:
    """f16_copy.cuh over x, four floats a thread, about eight blocks a multiprocessor,
    grid-stride: kind "copy" (extra: s, y) or "absmax" (extra: the int it keeps)."""
    import cupy as cp
    from . import build
    dev = cp.cuda.Device().id
    n4 = np.int64(x.size // 4)
    blocks = max(1, min(-(-int(n4) // build.F16_COPY_THREADS), 8 * device.current(dev).sm_count))
    name, args = ((build.F16_COPY_NAME, (x, *extra, n4)) if kind == "copy" else
                  (build.F16_ABSMAX_NAME, (x, n4, *extra)))
    build.get_f16_copy(dev, name)((blocks,), (build.F16_COPY_THREADS,), args)


@dataclasses.dataclass(frozen=True)
class Cast:
    """The float16 copies of one backward and their Factors."""

    q: object
    k: object
    v: object
    out: object
    dout: object
    factors: Factors


def cast(q, k, v, out, dout, scale: float) -> Cast:
    """Cast float32 CuPy arrays (any strides) to C-contiguous float16 copies (``copy``'s rule)
    with one host read for the four maxima (out takes v's factor)."""
    import cupy as cp
    absmax, scaled = _cupy_kernels()
    bits = cp.zeros(4, cp.int32)   # max |x| of each, as its float's bits
    for i, x in enumerate((q, k, v, dout)):
        if _vectors(x):
            _launch4("absmax", x, (bits[i:],))
        elif x.size:
            bits[i] = absmax(x).view(cp.int32)
    f = Factors.of(bits.view(cp.float32).get().tolist(), scale)

    def to16(x, s):
        y = cp.empty(x.shape, cp.float16)
        if _vectors(x):
            _launch4("copy", x, (np.float32(s), y))
        elif x.size:
            scaled(x, cp.float32(s), y)
        return y

    return Cast(to16(q, f.a), to16(k, f.b), to16(v, f.e), to16(out, f.e), to16(dout, f.c), f)
