"""The kernels' parameter structs, as C++ declares them (kernels_cu/params.cuh).

C++ owns the layout: NVRTC compiles a small probe of ``params.cuh`` (no GPU needed) that writes
each field's name, size and element kind, and the struct's size, into PTX globals; :func:`layout`
reads them back, places each field at its natural alignment (what every C++ compiler does for
these ints, floats and pointers; checked against the struct's size, since offsetof is not
available in every NVRTC) and :meth:`Layout.pack` fills the struct by field name into the bytes
CuPy passes by value (a NumPy array of size one). Every field must be given and no other, so
the two sides cannot drift apart silently.
"""
from __future__ import annotations

import dataclasses
import functools
import struct

import numpy as np

from .._xp import accum_dtype, resolve_dtype
from . import build

# int, float, double, pointer, long long, a tensor map's 64-bit words (filled as addresses are,
# by _address, which passes ints through; aligned to 64 bytes: _ALIGN)
_KINDS = {1: "i", 2: "f", 3: "d", 4: "Q", 5: "q", 6: "Q"}
_ALIGN = {6: 64}
_PROBE = r"""
namespace cuflash_probe {
template <class X> struct Elem { static constexpr long long kind = 0, n = 1; };
template <> struct Elem<int> { static constexpr long long kind = 1, n = 1; };
template <> struct Elem<float> { static constexpr long long kind = 2, n = 1; };
template <> struct Elem<double> { static constexpr long long kind = 3, n = 1; };
template <> struct Elem<long long> { static constexpr long long kind = 5, n = 1; };
template <class X> struct Elem<X*> { static constexpr long long kind = 4, n = 1; };
template <class X> struct Elem<X* const> { static constexpr long long kind = 4, n = 1; };
template <> struct Elem<cuflash::TensorMap> { static constexpr long long kind = 6, n = 16; };
template <class X, int N> struct Elem<X[N]> {
    static constexpr long long kind = Elem<X>::kind, n = N * Elem<X>::n; };
using P = cuflash::{struct}<unsigned short, {acc}>;
}
#define CUFLASH_PROBE(type, name) \
    (long long)sizeof(cuflash_probe::P::name), \
    cuflash_probe::Elem<decltype(cuflash_probe::P::name)>::kind, \
    cuflash_probe::Elem<decltype(cuflash_probe::P::name)>::n,
#define CUFLASH_NAME(type, name) #name " "
extern "C" __device__ long long cuflash_layout[] = {
    {fields}(CUFLASH_PROBE) (long long)sizeof(cuflash_probe::P),
    (long long)alignof(cuflash_probe::P) };
extern "C" __device__ char cuflash_names[] = {fields}(CUFLASH_NAME);
"""


@dataclasses.dataclass(frozen=True)
class Field:
    name: str
    offset: int
    kind: str       # struct format of one element: 'i', 'f', 'd', 'q' or 'Q' (a pointer)
    count: int      # elements (1, or the product of an array field's dims)


@dataclasses.dataclass(frozen=True)
class Layout:
    """One parameter struct: its fields in declaration order and its size."""

    name: str
    fields: tuple
    size: int

    @functools.cached_property
    def _packer(self):
        fmt, pos = "<", 0
        for f in self.fields:
            fmt += f"{f.offset - pos}x" if f.offset > pos else ""
            fmt += f"{f.count}{f.kind}"
            pos = f.offset + f.count * struct.calcsize(f.kind)
        fmt += f"{self.size - pos}x" if self.size > pos else ""
        assert struct.calcsize(fmt) == self.size, (fmt, self.size)
        return struct.Struct(fmt)

    @functools.cached_property
    def names(self) -> tuple:
        return tuple(f.name for f in self.fields)

    @functools.cached_property
    def _plan(self) -> tuple:
        """(name, is a pointer, count) per field, and the name set: what pack walks per call."""
        return (tuple((f.name, f.kind == "Q", f.count) for f in self.fields), frozenset(self.names),
                np.dtype((np.void, self.size)))

    def pack(self, values: dict) -> np.ndarray:
        """The struct's bytes as a NumPy array of size one (CuPy passes it by value). `values`
        maps every field name to a Python number, a CuPy array or None (a pointer: its address,
        None = null) or, for array fields, a flat sequence of `count` numbers. (Every launch
        packs one: a few microseconds of a small call's host time.)"""
        plan, names, dtype = self._plan
        if values.keys() != names:
            missing = sorted(names - values.keys())
            extra = sorted(values.keys() - names)
            raise ValueError(f"{self.name}: fields not given {missing}, unknown fields {extra}")
        flat = []
        add, extend = flat.append, flat.extend
        for name, ptr, count in plan:
            v = values[name]
            if count > 1:
                v = list(v)
                if len(v) != count:
                    raise ValueError(f"{self.name}.{name} takes {count} values, got {len(v)}")
                extend([_address(x) for x in v] if ptr else v)
            else:
                add(_address(v) if ptr else v)
        return np.frombuffer(self._packer.pack(*flat), dtype=dtype)

    def offset(self, name: str) -> int:
        """The byte offset of field `name` in the struct."""
        for f in self.fields:
            if f.name == name:
                return f.offset
        raise KeyError(f"{self.name} has no field {name!r}")

    @functools.cached_property
    def _offsets(self) -> dict:
        return {f.name: f.offset for f in self.fields if f.kind == "Q" and f.count == 1}

    @functools.cached_property
    def word_slots(self) -> dict:
        """Each pointer field's index in the struct read as 64-bit words (pointers sit on 8-byte
        boundaries, and a struct holding one is a whole number of words): what a prepared launch
        (ops.ForwardLaunch) writes addresses into, one word each, per call."""
        if self.size % 8 or any(off % 8 for off in self._offsets.values()):
            raise AssertionError(f"{self.name}: pointers not on 64-bit words")
        return {name: off // 8 for name, off in self._offsets.items()}


def _address(x) -> int:
    """The device address of a CuPy array, a MemoryPointer (``.ptr``) or an int; 0 for None."""
    if x is None:
        return 0
    if type(x) is int:
        return x
    ptr = getattr(x, "ptr", None)       # a MemoryPointer
    if ptr is not None:
        return int(ptr)
    data = getattr(x, "data", None)
    return int(data.ptr) if data is not None and hasattr(data, "ptr") else int(x)


_STRUCTS = {"fwd": ("FwdParams", "CUFLASH_FWD_FIELDS"), "bwd": ("BwdParams", "CUFLASH_BWD_FIELDS")}


def layout(role: str, dtype) -> Layout:
    """The layout of the parameter struct of a pass ('fwd' or 'bwd') for inputs of `dtype`."""
    acc = "double" if accum_dtype(resolve_dtype(dtype)).itemsize == 8 else "float"
    return _layout(_STRUCTS[role][0], acc)


@functools.lru_cache(maxsize=None)
def _layout(struct_name: str, acc: str) -> Layout:
    fields = {name: macro for name, macro in _STRUCTS.values()}[struct_name]
    src = build.expand("params.cuh") + _PROBE.replace("{struct}", struct_name).replace(
        "{acc}", acc).replace("{fields}", fields)
    ptx = build.ptx_globals(src, f"params_{struct_name}_{acc}")
    nums = [int(x) for x in np.frombuffer(ptx["cuflash_layout"], dtype="<i8")]
    names = ptx["cuflash_names"].rstrip(b"\0").decode().split()
    out, pos, align = [], 0, 1
    for idx, name in enumerate(names):
        size, kind, count = nums[3 * idx: 3 * idx + 3]
        if kind not in _KINDS:
            raise RuntimeError(f"{struct_name}.{name}: a field type params.py cannot fill")
        elem = struct.calcsize(_KINDS[kind])
        if elem * count != size:
            raise RuntimeError(f"{struct_name}.{name}: {count} × {_KINDS[kind]} is not {size} bytes")
        at = _ALIGN.get(kind, elem)
        pos = -(-pos // at) * at              # natural alignment of the element type
        out.append(Field(name, pos, _KINDS[kind], count))
        pos, align = pos + size, max(align, at)
    total, struct_align = nums[3 * len(names)], nums[3 * len(names) + 1]
    if -(-pos // align) * align != total or align != struct_align:
        raise RuntimeError(f"{struct_name}: fields at natural alignment end at {pos} bytes, "
                           f"aligned to {align}; sizeof says {total}, alignof {struct_align}")
    return Layout(struct_name, tuple(out), total)
