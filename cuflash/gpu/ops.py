"""Launch the forward and backward kernels on CuPy arrays (batch, T, d), on CuPy's current stream.

Called by ``cuflash.api`` after the arguments are checked and flattened; shapes here are
(batch, T, d) for q, out, dout and (batch, S, d) for k, v, all C-contiguous. Each kernel takes one
parameter struct (kernels_cu/params.cuh), filled here by field name (``params.Layout.pack``).
"""
from __future__ import annotations

import contextlib
import functools
import math

import numpy as np

from .._xp import accum_dtype, dtype_name
from . import build, params, plan

_LOG2E = 1.4426950408889634
_MAX_GRID_Y = 65535
_UNBOUNDED = 1 << 30          # kernels_cu/params.cuh kUnbounded: an open window side
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


@functools.lru_cache(maxsize=None)
def _ready(spec, device_id: int):
    """(kernel, dynamic shared memory) of a spec checked against a device, once per pair: the
    host-side cost of a launch matters next to kernels of a few hundred microseconds."""
    plan.validate(spec, smem_limit(device_id), device_arch(device_id))
    return build.get_kernel(spec, device_id), spec.smem_bytes()


@functools.lru_cache(maxsize=None)
def _specs(dtype: str, d: int, tile, variant, backward: bool, deterministic: bool = True):
    return plan.specs_for(dtype, d, tile, variant, backward, deterministic)


def _grid(grid_x: int, batch: int):
    """(x, y, z) covering the batch: y up to 65535, z continues it (kernels: batch_index())."""
    y = min(batch, _MAX_GRID_Y)
    return (grid_x, y, math.ceil(batch / y))


def _launch(kern, smem, threads, grid_x, batch, args):
    """One launch over the batch. An empty grid (no batch entry, or no tile) launches nothing:
    CuPy turns a zero grid dimension into 1 (``max(1, grid[i])`` in its Function.__call__), so
    the kernel would run on empty arrays (tests/empty_grid_probe.py: a zero-size batch ended in
    CUDA_ERROR_ILLEGAL_ADDRESS and a dead context)."""
    if grid_x <= 0 or batch <= 0:
        return
    kern(_grid(grid_x, batch), (threads,), (args,), shared_mem=smem)


def _mask_mod_fields(p) -> dict:
    """A mask_mod's captures as CUFLASH_COMMON_FIELDS take them (arrays on this device, int32,
    C-contiguous; shapes padded with 1), and empty tile lists (filled per launch)."""
    cp = _cp()
    tensors, shapes, ints = [None] * 4, [1] * 16, [0] * 4
    if p.mask_mod is not None:
        for t, (_, a) in enumerate(p.mask_mod.arrays()):
            a = cp.ascontiguousarray(cp.asarray(a, dtype=np.int32))
            tensors[t] = a
            shapes[4 * t: 4 * t + a.ndim] = a.shape
        for n, (_, x) in enumerate(p.mask_mod.ints()):
            ints[n] = int(x)
    return dict(mm_tensor=tensors, mm_shape=shapes, mm_int=ints, mm_count=None, mm_index=None,
                mm_inner=0, mm_count_stride=0, mm_batched=0)


def _tile_lists(spec, fields, layout, T, S):
    """Fill a mask_mod kernel's tile lists (kernels_cu/mask.cuh, TileLists) for its tiles:
    for each outer tile (query tiles; key tiles for the dK/dV kernel) the inner tiles it visits.
    Returns the packed parameters of that launch (the lists live as long as `fields`)."""
    cp = _cp()
    t = spec.tile
    by_keys = spec.role == "bwd_dkdv"
    n_q, n_k = math.ceil(T / t.block_m), math.ceil(S / t.block_n)
    outer, inner = (n_k, n_q) if by_keys else (n_q, n_k)
    batched = bool(fields["_mod"].uses() & {"b", "h"})
    rows = fields["batch"] if batched else 1
    count = cp.empty((rows, outer), dtype=np.int32)
    index = cp.empty((rows, outer, max(1, inner)), dtype=np.int32)
    f = _plain(fields)
    f.update(mm_count=count, mm_index=index, mm_inner=max(1, inner), mm_count_stride=outer,
             mm_batched=int(batched))
    args = layout.pack(f)
    if outer > 0 and rows > 0:
        kern = build.get_tile_lists(spec, cp.cuda.Device().id)
        kern((outer, rows), (256,), (args,))
    fields.setdefault("_keep", []).append((count, index))   # alive until the launches are issued
    return args


def _plain(fields) -> dict:
    """The struct's fields alone (keys starting with '_' are this module's bookkeeping)."""
    return {k: v for k, v in fields.items() if not k.startswith("_")}


def _pack(spec, layout, fields, T, S):
    """The launch's packed parameters; with a mask_mod, its tile lists built first."""
    if spec.variant.mod_key:
        return _tile_lists(spec, fields, layout, T, S)
    return layout.pack(_plain(fields))


def _common(p, batch, T, S, d, acc) -> dict:
    """The fields every pass shares (CUFLASH_COMMON_FIELDS), from a checks.Problem."""
    m = p.mask
    return dict(alibi_slopes=p.alibi_slopes, **_mask_mod_fields(p), _mod=p.mask_mod,
                batch=batch, heads=p.heads, T_len=T, S_len=S, d=d,
                window_left=_UNBOUNDED if m.left is None else m.left,
                window_right=_UNBOUNDED if m.right is None else m.right,
                scale=acc.type(p.scale), scale_log2=acc.type(p.scale * _LOG2E),
                softcap=acc.type(p.softcap or 0.0))


def variant_of(p) -> plan.Variant:
    """The kernel variant a problem needs (mask kind, score modifiers, mask_mod)."""
    m = p.mask
    kind = "dense" if m.dense else "causal" if (m.left is None and m.right == 0) else "window"
    mod = p.mask_mod
    return plan.Variant(kind, p.softcap is not None, p.alibi_slopes is not None,
                        None if mod is None else mod.key(),
                        None if mod is None else mod.cuda_source())


def forward(q, k, v, p, *, tile):
    """out (batch, T, d) in q's dtype, lse (batch, T) float32 (float64 for float64 inputs).
    `p`: the checks.Problem (mask, scale, score modifiers)."""
    B, T, d = q.shape
    S = k.shape[1]
    dt = dtype_name(q.dtype)
    acc = accum_dtype(q.dtype)
    (spec,) = _specs(dt, d, tile, variant_of(p), False)
    q, k, v = _aligned(q), _aligned(k), _aligned(v)
    out = _empty(q.shape, q.dtype)
    lse = _empty((B, T), acc)
    if B == 0 or T == 0:
        return out, lse
    kern, smem = _ready(spec, _cp().cuda.Device().id)
    fields = dict(q=q, k=k, v=v, out=out, lse=lse, **_common(p, B, T, S, d, acc))
    args = _pack(spec, params.layout("fwd", dt), fields, T, S)
    _launch(kern, smem, spec.threads(), math.ceil(T / tile.block_m), B, args)
    return out, lse


def backward(dout, q, k, v, out, lse, p, *, tile, deterministic):
    """(dq, dk, dv) shaped like q, k, v; P recomputed from q, k, lse."""
    cp = _cp()
    B, T, d = q.shape
    S = k.shape[1]
    dt = dtype_name(q.dtype)
    acc = accum_dtype(q.dtype)
    specs = _specs(dt, d, tile, variant_of(p), True, deterministic)
    dout, q, k, v, out = (_aligned(x) for x in (dout, q, k, v, out))
    lse = cp.ascontiguousarray(lse, dtype=acc)
    dev = cp.cuda.Device().id
    dkdv = specs[0]
    D = _empty((B, T), acc)
    dk = _empty(k.shape, k.dtype)
    dv = _empty(v.shape, v.dtype)
    atomic = dkdv.atomic_dq
    dq_accum = cp.zeros((B, T, d), dtype=acc) if atomic else None
    dq = None if atomic else _empty(q.shape, q.dtype)
    fields = dict(q=q, k=k, v=v, out=out, dout=dout, lse=lse, D=D, dq=dq, dk=dk, dv=dv,
                  dq_accum=dq_accum, **_common(p, B, T, S, d, acc))
    layout = params.layout("bwd", dt)
    if B == 0:
        return (dq_accum.astype(q.dtype) if atomic else dq), dk, dv

    # -- D = rowsum(dO ∘ O): one warp per row, 8 rows per block
    if B * T > 0:
        _launch(build.get_preprocess(dt, dev), 0, 256, math.ceil(B * T / 8), 1,
                layout.pack(_plain(fields)))
    # -- dK, dV (and dQ by atomics); then dQ in a fixed order
    kern, smem = _ready(dkdv, dev)
    _launch(kern, smem, dkdv.threads(), math.ceil(S / tile.block_n), B,
            _pack(dkdv, layout, fields, T, S))
    if atomic:
        return dq_accum.astype(q.dtype), dk, dv
    kern, smem = _ready(specs[1], dev)
    _launch(kern, smem, specs[1].threads(), math.ceil(T / specs[1].tile.block_m), B,
            _pack(specs[1], layout, fields, T, S))
    return dq, dk, dv
