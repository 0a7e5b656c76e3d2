"""Tensor maps for the Tensor Memory Accelerator (kernels_cu/tma.cuh), made by the driver's
``cuTensorMapEncodeTiled`` through ctypes (libcuda is where a GPU is; CuPy exposes no tensor-map
call, and cuda-bindings would be a dependency for one function).

A map describes one (sequences, heads, rows, d) array as the copy engine reads it: dims (d, rows,
heads, sequences) innermost first, their strides in bytes, a box of 128 bytes of columns ×
``box_rows`` rows, 128-byte swizzled: for 16-bit elements 64 columns, one panel of a wgmma tile
(wgmma_tiles.cuh), elements outside the array read as zero; for float32 (the atomic-dQ kernel's
dq_accum, which the engine adds into) 32 columns, elements outside the array left alone. The
map holds the array's address, so a launch re-encodes its maps when the addresses change
(:class:`TileMaps`); the rest is fixed per launch.
"""
from __future__ import annotations

import ctypes
import functools

_DATA_TYPE = {"float16": 6, "bfloat16": 9, "float32": 7}   # CU_TENSOR_MAP_DATA_TYPE_FLOAT16, ...
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}
_SWIZZLE_128B = 3                             # CU_TENSOR_MAP_SWIZZLE_128B
_L2_PROMOTION_256B = 3                        # CU_TENSOR_MAP_L2_PROMOTION_L2_256B
_WORDS = 16                                   # a CUtensorMap: 128 bytes, 64-byte aligned
_STRIDE_LIMIT = 1 << 40
_U64x4, _U64x3, _U32x4 = ctypes.c_uint64 * 4, ctypes.c_uint64 * 3, ctypes.c_uint32 * 4


@functools.lru_cache(maxsize=None)
def _encode_tiled():
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuTensorMapEncodeTiled
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                   ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return fn


def map_shape(shape, strides, itemsize: int):
    """(dims, byte strides) of a map over an array of `shape` (sequences, heads, rows, d) with
    element `strides` [sequence, head, row] (views.strides; d contiguous), or None where the copy
    engine cannot read it: a stride that is not a positive multiple of 16 bytes below 2^40 (a
    broadcast axis, stride 0) or a dim of 0 or past 2^32. An axis of one element has its stride
    replaced by the next inner one's span, which the engine accepts and never steps."""
    seqs, heads, rows, d = (int(n) for n in shape)
    dims = (d, rows, heads, seqs)
    if any(n <= 0 or n > 1 << 32 for n in dims):
        return None
    out, span = [], d * itemsize
    for n, s in zip(dims[1:], (strides[2], strides[1], strides[0])):
        b = int(s) * itemsize if n > 1 else span
        if b <= 0 or b % 16 or b >= _STRIDE_LIMIT:
            return None
        out.append(b)
        span = b * n
    return dims, tuple(out)


class TileMaps:
    """The tensor maps of one launch's arrays (the forward's q, k and v): fixed dims, strides,
    boxes and dtype; ``write(words, first, addresses)`` encodes one map per address into 16
    consecutive 64-bit words each from words[first] (a parameter struct's ``tma`` field),
    skipping the encoding when the addresses are the last call's."""

    def __init__(self, dtype: str, arrays):
        """arrays: (shape, element strides, box rows[, dtype]) per map, shape (sequences, heads,
        rows, d), dtype (default ``dtype``) one of float16, bfloat16, float32. Raises ValueError
        when one of them cannot be mapped (map_shape)."""
        self.args = []
        for shape, strides, box_rows, *own in arrays:
            name = own[0] if own else dtype
            size = _ITEMSIZE[name]
            got = map_shape(shape, strides, size)
            if got is None:
                raise ValueError(f"no tensor map for shape {tuple(shape)}, strides {strides}")
            dims, st = got
            self.args.append((_DATA_TYPE[name], _U64x4(*dims), _U64x3(*st),
                              _U32x4(128 // size, min(int(box_rows), 256), 1, 1)))
        # one 64-byte aligned CUtensorMap to encode into (the driver's type is aligned so)
        self._buf = (ctypes.c_uint64 * (_WORDS + 8))()
        self._at = -(-ctypes.addressof(self._buf) // 64) * 64
        self._ones = _U32x4(1, 1, 1, 1)
        self._last, self._words = None, (ctypes.c_uint64 * (_WORDS * len(self.args)))()

    def _encode(self, i: int, address: int) -> None:
        dtype, dims, strides, box = self.args[i]
        rc = _encode_tiled()(self._at, dtype, 4, address, ctypes.addressof(dims),
                             ctypes.addressof(strides), ctypes.addressof(box),
                             ctypes.addressof(self._ones), 0, _SWIZZLE_128B, _L2_PROMOTION_256B, 0)
        if rc != 0:
            raise RuntimeError(f"cuTensorMapEncodeTiled returned CUresult {rc} (dims "
                               f"{tuple(dims)}, strides {tuple(strides)}, box {tuple(box)})")
        ctypes.memmove(ctypes.addressof(self._words) + 8 * _WORDS * i, self._at, 8 * _WORDS)

    def write(self, words, first: int, addresses) -> None:
        addresses = tuple(addresses)
        if addresses != self._last:
            for i, a in enumerate(addresses):
                self._encode(i, a)
            self._last = addresses
        ctypes.memmove(ctypes.addressof(words) + 8 * first, self._words, ctypes.sizeof(self._words))


def no_maps(count: int) -> dict:
    """The tma and tma_loads fields of a launch without maps (kernels_cu/params.cuh)."""
    return dict(tma=[0] * (_WORDS * count), tma_loads=0)


def map_fields(dtype: str, arrays, count: int):
    """(TileMaps or None, the tma and tma_loads fields) of `count` maps, one per entry of
    ``arrays``: (address, shape (sequences, heads, rows, d), element strides, box rows[, dtype]),
    the rest zero. None and no maps (the kernels' cp.async loads) when one of the arrays cannot
    be mapped (map_shape). The caller's thread needs a current context (the driver encodes in
    it: ops.bind_context)."""
    try:
        maps = TileMaps(dtype, [entry[1:] for entry in arrays])
    except ValueError:
        return None, no_maps(count)
    words = (ctypes.c_uint64 * (_WORDS * count))()
    maps.write(words, 0, [entry[0] for entry in arrays])
    return maps, dict(tma=list(words), tma_loads=1)
