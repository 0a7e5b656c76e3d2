"""How float32 attention's two products (S = Q·Kᵀ, O = P·V) are computed: the ``precision=``
argument, written once for the kernels, the CPU twin, naive attention and the tools.

    'ieee'     float32 products on CUDA cores (the simt kernels): the reference.
    'tf32'     each operand rounded to TF32 (float32 with a 10-bit mantissa: to nearest, ties away
               from zero, as PTX's cvt.rna.tf32.f32), one tensor-core product with float32
               sums. Faster, about 1e-3 relative error (NOTES.md, issue 15). On Hopper (sm_90)
               dense batches' backward takes one float16 product of rows scaled by powers of two
               where it pays (kernel family 'wgmma_f16x1', ``ALSO``): the same 11-bit
               significands as a TF32 product, at twice its rate (NOTES.md v55-v56).
    'highest'  the default. Each operand split x = big + small (big = tf32(x), small =
               tf32(x - big), both exact), a·b = small_a·big_b + big_a·small_b + big_a·big_b on
               TF32 tensor cores (CUTLASS's 3xTF32; small·small is below float32's rounding),
               each k-step's sum added to the running one in float32 (the tensor core's own
               accumulator truncates): float32's accuracy. GPUs before sm_80 compute it on
               the CUDA cores ('ieee', as accurate). On Hopper (sm_90) dense batches take a
               third way where it pays (tile.float32_wgmma_pays): each operand scaled by a power
               of two per row and split into two float16 parts, three float16 products a pair on
               the warpgroup tensor cores (kernel family 'wgmma_f16x3', ``ALSO``).

The GPU runs 'tf32' and 'highest' in the mma forward (kernels_cu/tf32.cuh) as the kernel
families 'tf32' and 'tf32x3' (``FAMILY``); on the CPU the twin and naive attention compute the
same roundings in NumPy (:func:`matmul`). A product of two TF32 numbers is exact in float32
(11 + 11 significant bits), so a float32 matmul of TF32-rounded operands stands for the tensor
core's (the order of the sums differs).
"""
from __future__ import annotations

import numpy as np

from ._xp import dtype_name

PRECISIONS = ("ieee", "tf32", "highest")

#: precision -> the kernel family that runs it on the GPU ('ieee': the simt kernels)
FAMILY = {"ieee": "simt", "tf32": "tf32", "highest": "tf32x3"}

#: precision -> the precision whose kernels may run it in place of its own family's: 'highest' on
#: the CUDA cores ('ieee': float32 products, as accurate; GPUs before sm_80 have no TF32). A tile
#: given for 'highest' may be a CUDA-core tile (cuflash.api), and default_tile falls back to one.
STANDS_IN = {"highest": "ieee"}

#: kernel family -> TF32 products per operand pair (kernels_cu/tf32.cuh, Tf32Products<N>)
PRODUCTS = {"tf32": 1, "tf32x3": 3}

#: kernel families beside FAMILY's that compute a precision: 'tf32' on Hopper's warpgroup
#: tensor cores (kernels_cu/flash_fwd_wgmma_tf32.cu; a forward, the default of dense batches on
#: sm_90 where tile.wgmma_tf32_pays), and 'highest' as three float16 products on Hopper's 16-bit
#: warpgroup tensor cores (kernels_cu/flash_fwd_wgmma_x3.cu and flash_bwd_wgmma_x3.cu: the
#: default of dense batches on sm_90 where tile.wgmma_f16x3_pays; NOTES.md v44-v48), and 'tf32'
#: as one float16 product of such rows (the same kernels with F16Products<1>: the default
#: backward of dense batches on sm_90 where tile.float32_wgmma_pays; v55-v56)
ALSO = {"wgmma_tf32": "tf32", "wgmma_f16x3": "highest", "wgmma_f16x1": "tf32",
        "wgmma_f16s": "tf32"}


#: float32's default: float32's accuracy (as 'ieee') at the TF32 tensor cores' speed where there
#: are some (sm_80 and later; before, 'highest' runs on the CUDA cores). H200 (NOTES.md v22):
#: 1.4-1.6x the CUDA-core forward at d = 64-256, error within naive float32's.
DEFAULT = "highest"


def check(precision, dtype) -> str:
    """The precision a call runs: ``precision`` checked against the inputs' dtype. None is the
    default (``DEFAULT`` for float32); float16, bfloat16 and float64 have one precision each
    ('native'), so only None, or 'native' itself (the value a call resolves to), is accepted
    for them."""
    name = dtype_name(dtype)
    if precision is None or (precision == "native" and name != "float32"):   # (resolved already)
        return DEFAULT if name == "float32" else "native"
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} must be one of {PRECISIONS} (or None)")
    if name != "float32":
        raise ValueError(f"precision={precision!r} applies to float32 inputs; these are {name} "
                         f"(leave precision=None)")
    return precision


def of_family(family: str) -> str:
    """The precision a kernel family computes float32 in ('ieee' for the others)."""
    if family in ALSO:
        return ALSO[family]
    return next((p for p, f in FAMILY.items() if f == family and p != "ieee"), "ieee")


def tf32(x, xp=np):
    """float32 -> the nearest TF32 value (ties away from zero), as float32 (NumPy or CuPy); a NaN
    stays a NaN (as cvt.rna.tf32.f32 keeps it: rounding the bits of one whose payload lies in the
    dropped 13 bits alone would give an infinity)."""
    b = xp.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (b + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    nan = (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return xp.where(nan, b, rounded).view(np.float32)


def split(x, xp=np):
    """(big, small): x = big + small to float32's precision, both TF32."""
    big = tf32(x, xp)
    return big, tf32(xp.asarray(x, dtype=np.float32) - big, xp)


def matmul(a, b, precision: str, xp=np):
    """a @ b of float32 arrays as ``precision`` computes it: 'ieee' (and 'native'): plainly;
    'tf32': TF32-rounded operands; 'highest': the split's three products, small terms first."""
    if precision in ("ieee", "native"):
        return a @ b
    f = np.float32
    if precision == "tf32":
        return (tf32(a, xp) @ tf32(b, xp)).astype(f, copy=False)
    if precision != "highest":
        raise ValueError(f"precision={precision!r} must be one of {PRECISIONS}")
    (ab, as_), (bb, bs) = split(a, xp), split(b, xp)
    small = ((as_ @ bb).astype(f, copy=False) + (ab @ bs).astype(f, copy=False)).astype(f)
    return ((ab @ bb).astype(f, copy=False) + small).astype(f, copy=False)
