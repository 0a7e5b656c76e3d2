"""The arrays the CUDA kernels are handed, and the copies made when an array cannot be one.

The kernels read every q-, k- or v-shaped array through three strides (kernels_cu/seq.cuh):
(sequence, head, row), plus a unit stride along the head dim. So a caller's array runs in place
when it is a view of that form: any broadcast (stride 0), any transpose of the batch, head and
row axes (e.g. a (B, T, H, d) array transposed to (B, H, T, d)), any slice of rows or heads.
What the kernels cannot take, and the copy made for it, each in one place:

    head dim   not in KERNEL_HEAD_DIMS (multiples of 8 from 16 to 256), or d_v != d: q, k, v
               (and dout, out) zero-padded to one D = checks.kernel_head_dim(max(d, d_v))
               (``checks.pad_head_dim``); outputs sliced back (``checks.unpad``)
    alignment  a stride or the start not a multiple of 16 bytes, a negative stride, or a head
               dim with a stride other than 1: a C-contiguous copy
    leading    leading dims (before the head axis) that do not merge into one stride: the
               copy that NumPy / CuPy's reshape makes

Written for NumPy and CuPy alike, so that the CPU tests check what the GPU path hands over.
"""
from __future__ import annotations

import math

from .. import checks


def kernel_ok(x) -> bool:
    """Whether the kernels can read x (..., n, D) in place: unit stride along the head dim, the
    other strides non-negative multiples of 16 bytes, the start 16-byte aligned."""
    if x.size == 0:
        return True   # nothing is read
    item = x.dtype.itemsize
    if x.shape[-1] > 1 and x.strides[-1] != item:
        return False
    if any(s < 0 or s % 16 for s, n in zip(x.strides[:-1], x.shape[:-1]) if n > 1):
        return False
    return address(x) % 16 == 0


def address(x) -> int:
    """The address of x's first element (a CuPy array's device pointer, a NumPy array's)."""
    data = x.data
    return int(data.ptr) if hasattr(data, "ptr") else int(x.__array_interface__["data"][0])


def bhnd(x, batch_shape: tuple, heads: int, D: int, xp):
    """x (..., heads or 1, n, d) as the kernels' (sequences, heads, n, D) array: padded to D,
    broadcast over batch_shape (the leading dims before the head axis) and over heads when it
    has one, the leading dims merged; a view of x when ``kernel_ok`` allows, else a copy."""
    x = checks.pad_head_dim(x, D, xp)
    n = x.shape[-2]
    x = xp.broadcast_to(x, tuple(batch_shape) + (heads, n, D))
    x = x.reshape((math.prod(batch_shape), heads, n, D))
    return x if kernel_ok(x) else x.copy(order="C")   # a fresh, aligned buffer


def packed(x, D: int, xp):
    """A packed (total, heads, d) array padded to D, in place when ``kernel_ok`` allows."""
    x = checks.pad_head_dim(x, D, xp)
    return x if kernel_ok(x) else x.copy(order="C")


def kv_heads(k, v) -> int:
    """The kv heads the kernels see: the larger head count of k and v (axis -3; 1 without a
    head axis). The other is broadcast to it; under GQA it divides the query heads."""
    return max(x.shape[-3] if x.ndim >= 3 else 1 for x in (k, v))


def strides(x, is_packed: bool = False) -> list:
    """[sequence, head, row] strides in elements (kernels_cu/seq.cuh): of a (sequences, heads,
    n, D) array, or of a packed (total, heads, D) array (sequence stride 0: cu_seqlens give
    each sequence's first row)."""
    item = x.dtype.itemsize
    if is_packed:
        return [0, x.strides[1] // item, x.strides[0] // item]
    return [x.strides[0] // item, x.strides[1] // item, x.strides[2] // item]
