"""Launch the forward and backward kernels on CuPy arrays (batch, T, d), on CuPy's current stream.

Called by ``cuflash.api`` after the arguments are checked and flattened; shapes here are
(batch, T, d) for q, out, dout and (batch, S, d) for k, v, all C-contiguous.
"""
from __future__ import annotations

import contextlib
import functools
import math

import numpy as np

from .._xp import accum_dtype, dtype_name
from . import build, plan

_LOG2E = 1.4426950408889634
_MAX_GRID_Y = 65535
_POISON = [False]


@contextlib.contextmanager
def poisoned_outputs():
    """Within this block every output buffer is filled with NaN before the kernels run, so a
    test can check that the kernels wrote every element (inputs finite => outputs finite)."""
    _POISON.append(True)
    try:
        yield
    finally:
        _POISON.pop()


def _empty(shape, dtype):
    cp = _cp()
    out = cp.empty(shape, dtype=dtype)
    if _POISON[-1]:
        out.fill(float("nan"))
    return out


def _cp():
    import cupy
    return cupy


def smem_limit(device_id: int | None = None) -> int:
    """Opt-in shared memory per block of a device (default: the current one), in bytes."""
    return _smem_limit(_cp().cuda.Device().id if device_id is None else device_id)


@functools.lru_cache(maxsize=None)
def _smem_limit(device_id: int) -> int:
    # Device.attributes queries every attribute: once per device, not once per call
    return int(_cp().cuda.Device(device_id).attributes["MaxSharedMemoryPerBlockOptin"])


def device_arch(device_id: int | None = None) -> str:
    """'sm_XY' of a device (default: the current one), from its compute capability."""
    return _device_arch(_cp().cuda.Device().id if device_id is None else device_id)


@functools.lru_cache(maxsize=None)
def _device_arch(device_id: int) -> str:
    return f"sm_{_cp().cuda.Device(device_id).compute_capability}"


def _aligned(x):
    """x itself when its data is 16-byte aligned (the kernels load 16 bytes at a time), else a copy."""
    return x if x.data.ptr % 16 == 0 else x.copy()


def _batches(B: int):
    """Batch ranges small enough for gridDim.y."""
    for b0 in range(0, B, _MAX_GRID_Y):
        yield b0, min(B, b0 + _MAX_GRID_Y)


@functools.lru_cache(maxsize=None)
def _ready(spec, device_id: int):
    """(kernel, dynamic shared memory) of a spec checked against a device, once per pair: the
    host-side cost of a launch matters next to kernels of a few hundred microseconds."""
    plan.validate(spec, smem_limit(device_id), device_arch(device_id))
    return build.get_kernel(spec, device_id), spec.smem_bytes()


@functools.lru_cache(maxsize=None)
def _specs(dtype: str, d: int, tile, causal: bool, backward: bool, deterministic: bool = True):
    return plan.specs_for(dtype, d, tile, causal, backward, deterministic)


def _whole(x):
    return x


def _launch(spec, grid_x, B, args_of):
    """Launch `spec` over the batch in chunks of at most 65535 (gridDim.y). ``args_of(cut)``
    builds the arguments, passing each per-batch array through ``cut`` (no slicing, and no
    view objects, when one chunk covers the batch). An empty grid (no batch entry, or no tile)
    launches nothing: CuPy turns a zero grid dimension into 1 (``max(1, grid[i])`` in its
    Function.__call__), so the kernel would run on empty arrays (tests/empty_grid_probe.py: a
    zero-size batch ended in CUDA_ERROR_ILLEGAL_ADDRESS and a dead context)."""
    if grid_x <= 0 or B <= 0:
        return
    kern, smem = _ready(spec, _cp().cuda.Device().id)
    if B <= _MAX_GRID_Y:
        kern((grid_x, B), (spec.threads(),), args_of(_whole) + (np.int32(smem),),
             shared_mem=smem)
        return
    for b0, b1 in _batches(B):
        kern((grid_x, b1 - b0), (spec.threads(),),
             args_of(lambda x: x[b0:b1]) + (np.int32(smem),), shared_mem=smem)


def forward(q, k, v, *, causal, scale, tile):
    """out (batch, T, d) in q's dtype, lse (batch, T) float32 (float64 for float64 inputs)."""
    cp = _cp()
    B, T, d = q.shape
    S = k.shape[1]
    dt = dtype_name(q.dtype)
    acc = accum_dtype(q.dtype)
    (spec,) = _specs(dt, d, tile, causal, False)
    q, k, v = _aligned(q), _aligned(k), _aligned(v)
    out = _empty(q.shape, q.dtype)
    lse = _empty((B, T), acc)
    grid_x = math.ceil(T / tile.block_m)
    _launch(spec, grid_x, B, lambda cut: (
        cut(q), cut(k), cut(v), cut(out), cut(lse), np.int32(T), np.int32(S),
        np.int32(d), acc.type(scale * _LOG2E)))
    return out, lse


def backward(dout, q, k, v, out, lse, *, causal, scale, tile, deterministic):
    """(dq, dk, dv) shaped like q, k, v; P recomputed from q, k, lse."""
    cp = _cp()
    B, T, d = q.shape
    S = k.shape[1]
    dt = dtype_name(q.dtype)
    acc = accum_dtype(q.dtype)
    specs = _specs(dt, d, tile, causal, True, deterministic)
    dout, q, k, v, out = (_aligned(x) for x in (dout, q, k, v, out))
    lse = cp.ascontiguousarray(lse, dtype=acc)
    dev = cp.cuda.Device().id

    # -- D = rowsum(dO ∘ O): one warp per row, 8 rows per block
    D = _empty((B, T), acc)
    rows = B * T
    if rows > 0:   # an empty grid launches nothing (see _launch)
        build.get_preprocess(dt, dev)((math.ceil(rows / 8),), (256,),
                                      (out, dout, D, np.int64(rows), np.int32(d)))

    dk = _empty(k.shape, k.dtype)
    dv = _empty(v.shape, v.dtype)
    sc, sl2 = acc.type(scale), acc.type(scale * _LOG2E)
    dkdv = specs[0]
    dq_accum = cp.zeros((B, T, d), dtype=acc) if dkdv.atomic_dq else cp.empty((1, 1, 1), dtype=acc)
    _launch(dkdv, math.ceil(S / tile.block_n), B, lambda cut: (
        cut(q), cut(k), cut(v), cut(dout), cut(lse), cut(D), cut(dk), cut(dv),
        cut(dq_accum) if dkdv.atomic_dq else dq_accum, np.int32(T), np.int32(S), np.int32(d),
        sc, sl2))
    if dkdv.atomic_dq:
        return dq_accum.astype(q.dtype), dk, dv
    dq = _empty(q.shape, q.dtype)
    _launch(specs[1], math.ceil(T / tile.block_m), B, lambda cut: (
        cut(q), cut(k), cut(v), cut(dout), cut(lse), cut(D), cut(dq),
        np.int32(T), np.int32(S), np.int32(d), sc, sl2))
    return dq, dk, dv
