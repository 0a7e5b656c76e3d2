"""Launch the forward and backward kernels on CuPy arrays, on CuPy's current stream.

Called by ``cuflash.api`` and ``cuflash.varlen`` after the arguments are checked. The kernels
read the caller's arrays in place where ``views`` allows (any strides, broadcasts, GQA's shared
kv heads, packed batches) and write new C-contiguous outputs. Each kernel takes one parameter
struct (kernels_cu/params.cuh), filled here by field name (``params.Layout.pack``).
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import math
import threading

import numpy as np

from .. import checks, device
from .._xp import accum_dtype, dtype_name
from ..mask import UNBOUNDED
from ..tile import F16_SCALED, F16_SPLIT, section_rows
from . import build, f16_scaled, f16x3_stage, params, plan, tf32_stage, tma, views

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
    return device.current(device_id).smem_per_block


def sm_count(device_id: int | None = None) -> int:
    """Streaming multiprocessors of a device (default: the current one)."""
    return device.current(device_id).sm_count


#: The most grid rows per section of the order blocks start in (None: tile.section_rows; tests
#: set it)
_SCHED_ROWS = None

#: Ranks per GQA group of the dK/dV kernels (None: _group_ranks' rule; tests and benchmarks set it)
_GROUP_RANKS = None


def _group_ranks(group: int, blocks_per_rank: int, wave: int) -> int:
    """How many blocks share a kv head's key tile in the dK/dV kernels (block.cuh, KeyBlock): one
    walks all G query heads (no accumulators, G times fewer blocks than MHA); r of them walk G / r
    each and sum in a fixed order through float accumulators (epilogue.cuh, store_dkdv). The
    fewest ranks (a divisor of G) that give one and a half waves of blocks (``wave``: the dK/dV
    kernel's resident blocks, _ready): with the blocks started heaviest first (GridTile) that is
    enough to even out a causal pass's tiles, and each further rank costs the accumulators'
    traffic (H200, NOTES v13: G = 8 at 1.9 waves in one rank beat two ranks by 3-9%; G = 16 at
    one wave in one rank lost 30% causal)."""
    if _GROUP_RANKS is not None:
        return min(group, _GROUP_RANKS)
    return next(r for r in range(1, group + 1)
                if group % r == 0 and (2 * blocks_per_rank * r >= 3 * wave or r == group))


def device_arch(device_id: int | None = None) -> str:
    """'sm_XY' of a device (default: the current one), from its compute capability."""
    return device.current(device_id).arch


@functools.lru_cache(maxsize=None)
def _ready(spec, device_id: int):
    """(kernel, dynamic shared memory, resident blocks) of a spec checked against a device, once
    per pair: the host-side cost of a launch matters next to kernels of a few hundred
    microseconds. Resident blocks: the driver's occupancy of the kernel (its registers, threads
    and shared memory) times the SMs, the wave of the block order (block.cuh, GridTile)."""
    plan.validate(spec, smem_limit(device_id), device_arch(device_id))
    kern, smem = build.get_kernel(spec, device_id), spec.smem_bytes()
    fn = getattr(kern, "kernel", kern)
    with _cp().cuda.Device(device_id):
        per_sm = _driver().occupancyMaxActiveBlocksPerMultiprocessor(fn.ptr, spec.threads(), smem)
    return kern, smem, max(1, per_sm) * sm_count(device_id)


@functools.lru_cache(maxsize=None)
def _specs(dtype: str, d: int, tile, variant, backward: bool, deterministic: bool = True):
    return plan.specs_for(dtype, d, tile, variant, backward, deterministic)


@functools.lru_cache(maxsize=None)
def _allow_smem(kern, device_id: int) -> None:
    """Let a kernel launch with up to the device's opt-in shared memory per block (its layout's
    own is what build.get_kernel allows)."""
    with _cp().cuda.Device(device_id):
        kern.max_dynamic_shared_size_bytes = smem_limit(device_id)


def _grid(grid_x: int, batch: int):
    """(x, y, z) covering the batch: y up to 65535, z continues it (kernels: batch_index())."""
    y = min(batch, _MAX_GRID_Y)
    return (grid_x, y, math.ceil(batch / y))


def _launch(kern, smem, threads, grid_x, batch, args, stream=None):
    """One launch over the batch, on CuPy's current stream. An empty grid (no batch entry, or no
    tile) launches nothing: CuPy turns a zero grid dimension into 1 (``max(1, grid[i])`` in its
    Function.__call__), so the kernel would run on empty arrays (tests/empty_grid_probe.py: a
    zero-size batch ended in CUDA_ERROR_ILLEGAL_ADDRESS and a dead context).

    ``args``: the packed parameter struct, a NumPy array (Layout.pack; ForwardLaunch's per-call
    path launches its own). Each kernel takes that one struct, so the launch goes straight to
    the driver (cuLaunchKernel copies the bytes before it returns): CuPy's Function.__call__,
    which converts every argument, costs several microseconds more per launch. stream: the
    address of CuPy's current stream when the caller has it already."""
    if grid_x <= 0 or batch <= 0:
        return
    gx, gy, gz = _grid(grid_x, batch)
    params = _ONE_POINTER(args.ctypes.data)
    fn = getattr(kern, "kernel", kern)   # a RawKernel's Function (on the current device)
    bind_context()
    if stream is None:
        stream = _cp().cuda.get_current_stream().ptr
    _driver().launchKernel(fn.ptr, gx, gy, gz, threads, 1, 1, smem, stream,
                           ctypes.addressof(params), 0)


@functools.lru_cache(maxsize=None)
def _driver():
    from cupy_backends.cuda.api import driver
    return driver


#: cuLaunchKernel's kernelParams: one pointer (each kernel takes one struct)
_ONE_POINTER = ctypes.c_void_p * 1
_THREAD = threading.local()


def bind_context() -> None:
    """Make the current device's primary context current on this thread, once per thread.
    cuLaunchKernel (every launch here goes straight to the driver) takes the thread's current
    context, and a thread whose first CUDA call is such a launch has none:
    CUDA_ERROR_INVALID_CONTEXT (tests/test_kvcache.py, threads at once; CuPy's own calls bind
    it through the runtime, NOTES v26)."""
    if not getattr(_THREAD, "bound", False):
        rt = _cp().cuda.runtime
        rt.setDevice(rt.getDevice())
        _THREAD.bound = True


def _mask_mod_fields(mod) -> dict:
    """A mask_mod's captures as CUFLASH_COMMON_FIELDS take them (arrays on this device, int32,
    C-contiguous; shapes padded with 1), and empty tile lists (filled per launch)."""
    cp = _cp()
    tensors, shapes, ints = [None] * 4, [1] * 16, [0] * 4
    if mod is not None:
        for t, (_, a) in enumerate(mod.arrays()):
            a = cp.ascontiguousarray(cp.asarray(a, dtype=np.int32))
            tensors[t] = a
            shapes[4 * t: 4 * t + a.ndim] = a.shape
        for n, (_, x) in enumerate(mod.ints()):
            ints[n] = int(x)
    return dict(mm_tensor=tensors, mm_shape=shapes, mm_int=ints, mm_count=None, mm_index=None,
                mm_inner=0, mm_count_stride=0, mm_batched=0)


def _tile_lists(spec, fields, layout, mod, T, S, keep: list):
    """Fill a mask_mod kernel's tile lists (kernels_cu/mask.cuh, TileLists) for its tiles:
    for each outer tile (query tiles; key tiles for the dK/dV kernel) the inner tiles it visits.
    Returns the packed parameters of that launch (the lists kept alive in `keep`)."""
    cp = _cp()
    t = spec.tile
    by_keys = spec.role == "bwd_dkdv"
    n_q, n_k = math.ceil(T / t.block_m), math.ceil(S / t.block_n)
    outer, inner = (n_k, n_q) if by_keys else (n_q, n_k)
    batched = bool(mod.uses() & {"b", "h"})
    rows = fields["batch"] * fields["heads"] if batched else 1
    count = cp.empty((rows, outer), dtype=np.int32)
    index = cp.empty((rows, outer, max(1, inner)), dtype=np.int32)
    f = dict(fields, mm_count=count, mm_index=index, mm_inner=max(1, inner),
             mm_count_stride=outer, mm_batched=int(batched))
    args = layout.pack(f)
    if outer > 0 and rows > 0:
        kern = build.get_tile_lists(spec, cp.cuda.Device().id)
        kern((outer, rows), (256,), (args,))
    keep.append((count, index))   # alive until the launches are issued
    return args


def _args(spec, packed, layout, fields, mod, T, S, keep: list):
    """A launch's parameters: the pass's packed struct, or with a mask_mod the struct with this
    kernel's tile lists, built first."""
    if spec.variant.mod_key:
        return _tile_lists(spec, fields, layout, mod, T, S, keep)
    return packed


def _common(p, *, batch, heads, group, T, S, d, acc, cu_q=None, cu_k=None, lse_stride,
            num_splits=1, itemsize, device_id, wave_q=1, wave_k=1, scale=None) -> dict:
    """The fields every pass shares (CUFLASH_COMMON_FIELDS): the shapes and packing, the options
    of a checks.Problem or VarlenProblem (mask, scale, score modifiers, mask_mod), and the order
    blocks start in (tile.section_rows, for rows that stream max(T, S) rows of two d-wide
    operands of ``itemsize`` bytes; wave_q, wave_k: the resident blocks of the pass's query-tile
    and key-tile kernels, _ready); scale: the kernels' softmax scale where it is not the
    problem's (f16_scaled's copies)."""
    scale = p.scale if scale is None else scale
    sched = _SCHED_ROWS or section_rows(2 * max(T, S) * d * itemsize,
                                        device.current(device_id).l2_bytes)
    m = p.mask
    mod = getattr(p, "mask_mod", None)
    slopes = p.alibi_slopes   # (batch·heads,) in the kernels' order b·heads + h
    slopes = None if slopes is None else _cp().ascontiguousarray(slopes).reshape(-1)
    return dict(alibi_slopes=slopes, **_mask_mod_fields(mod),
                cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, lse_stride=lse_stride,
                batch=batch, heads=heads, group=group, T_len=T, S_len=S, d=d,
                window_left=UNBOUNDED if m.left is None else m.left,   # (Mask: < UNBOUNDED)
                window_right=UNBOUNDED if m.right is None else m.right,
                scale=acc.type(scale), scale_log2=acc.type(scale * _LOG2E),
                softcap=acc.type(p.softcap or 0.0), num_splits=num_splits, sched_rows=sched,
                wave_q=wave_q, wave_k=wave_k)


def merge_split_cap(spec, acc_itemsize: int) -> int:
    """The most splits the merge of split-KV (kernels_cu/split_combine.cuh) can take in the
    shared memory of `spec`'s kernel: each of its warps keeps one weight per split (acc_itemsize
    bytes each, rounded up to 16) and two rows of 32 lanes' 16-byte chunks (1024 bytes) in its
    share of the kernel's layout, of which the launch's kSmemBytes holds all but at most 1024
    bytes of alignment (mainloop.cuh, smem_budget)."""
    room = (spec.smem_bytes() - 1024) // (spec.threads() // 32) // 16 * 16
    return max(0, (room - 2 * MERGE_BYTES_PER_SPLIT) // acc_itemsize)


#: Bytes one warp of split-KV's merge stages of each split in a round: its 32 lanes' 16-byte
#: chunks (kernels_cu/split_combine.cuh, finish_split; merge_split_cap, merge_room_bytes)
MERGE_BYTES_PER_SPLIT = 32 * 16


def merge_room_bytes(splits: int, rows: int, warps: int, acc_itemsize: int) -> int:
    """The dynamic shared memory in which split-KV's merge (kernels_cu/split_combine.cuh,
    finish_split) stages all `splits` splits of a row in one round, for a query tile of at most
    `rows` rows on `warps` warps: each busy warp (one a row, at most `warps`) keeps the splits'
    weights (acc_itemsize bytes each, the whole rounded up to 16) and one 512-byte row of its
    lanes' chunks per split; plus 1024 bytes, of which the layout's alignment takes at most 1023
    (common.cuh, smem_budget). A launch of at most one block an SM may give a kernel
    this much (ForwardLaunch; NOTES v104)."""
    busy = max(1, min(rows, warps))
    weights = -(-splits * acc_itemsize // 16) * 16
    return busy * (weights + splits * MERGE_BYTES_PER_SPLIT) + 1024


@functools.lru_cache(maxsize=None)
def _merge_split_cap(spec, acc_itemsize: int) -> int:
    """merge_split_cap once per spec: spec.smem_bytes() hashes the kernel's sources (~75 µs),
    which every split launch's set-up paid otherwise."""
    return merge_split_cap(spec, acc_itemsize)


def num_splits_for(n_query_tiles: int, rows: int, key_tiles: int, device_id: int,
                   blocks_per_sm: int = 2, max_splits: int = 128) -> int:
    """Split-KV's splits when the caller leaves them open: one while the query tiles of every
    (sequence, head) fill the GPU (blocks_per_sm blocks per SM), else enough to fill it, at least
    two key tiles per split, at most max_splits. (Decode steps have their own rule:
    kvcache._decode_split.)"""
    sms = sm_count(device_id)
    blocks, target = max(n_query_tiles * rows, 1), blocks_per_sm * sms
    if blocks >= target or key_tiles < 4:
        return 1
    return max(1, min(max_splits, math.ceil(target / blocks), key_tiles // 2))


def variant_of(p, packed: bool = False, same_lens: bool = False) -> plan.Variant:
    """The kernel variant a problem needs (mask kind, score modifiers, mask_mod, packed, and
    whether a packed batch's keys share the queries' cu_seqlens)."""
    m = p.mask
    kind = "dense" if m.dense else "causal" if (m.left is None and m.right == 0) else "window"
    mod = getattr(p, "mask_mod", None)
    return plan.Variant(kind, p.softcap is not None, p.alibi_slopes is not None,
                        None if mod is None else mod.key(),
                        None if mod is None else mod.cuda_source(), packed,
                        same_lens=same_lens)


@dataclasses.dataclass(frozen=True)
class _Run:
    """One pass's kernel arrays: q (batch, heads, T, D) and k, v (batch, heads / group, S, D)
    (packed: q (total_q, heads, D), k, v (total_k, heads / group, D), cu_q and cu_k int32 on
    the device, T and S the longest lengths)."""

    q: object
    k: object
    v: object
    batch: int
    heads: int
    group: int
    T: int
    S: int
    cu_q: object = None
    cu_k: object = None

    @property
    def packed(self) -> bool:
        return self.cu_q is not None

    @property
    def same_lens(self) -> bool:
        """Packed, and the keys' cu_seqlens are the queries' (the same device array: the kernels
        then read one; plan.Variant.same_lens). Equal values in two arrays are not looked at."""
        return (self.packed and self.cu_q.size == self.cu_k.size
                and views.address(self.cu_q) == views.address(self.cu_k))

    def strides(self, x) -> list:
        return views.strides(x, self.packed)

    def variant(self, p) -> plan.Variant:
        """The kernel variant of this run: the problem's, packed or not."""
        return variant_of(p, self.packed, self.same_lens)

    def q_like(self):
        """A new array shaped like q (C-contiguous, q's dtype)."""
        return _empty(self.q.shape, self.q.dtype)

    def k_like(self):
        """A new array shaped like k (C-contiguous, k's dtype)."""
        return _empty(self.k.shape, self.k.dtype)

    def rows(self):
        """(shape, lse_stride) of lse, D and dq_accum's rows: (batch, heads, T), or (heads,
        total_q) packed (flash_attn_varlen's lse layout)."""
        if self.packed:
            total = self.q.shape[0]
            return (self.heads, total), [0, total]
        return (self.batch, self.heads, self.T), [self.heads * self.T, self.T]


def _dense_run(q, k, v, p, D):
    """The _Run of cuflash.attention's arrays (leading dims broadcast; GQA by the head axis)."""
    cp = _cp()
    bshape, heads = p.lead[:-1], p.heads
    hk = views.kv_heads(k, v)   # k and v broadcast to it; it divides heads (or is 1)
    if heads == 0 or not (0 < hk <= heads and heads % hk == 0):
        hk = heads              # no query heads, or k, v broadcast over q's heads
    return _Run(views.bhnd(q, bshape, heads, D, cp), views.bhnd(k, bshape, hk, D, cp),
                views.bhnd(v, bshape, hk, D, cp), math.prod(bshape), heads, heads // hk if hk else 1,
                p.T, p.S)


def _packed_run(q, k, v, vp, D):
    """The _Run of attention_varlen's packed arrays; the kernels read the caller's cu_seqlens
    (int32 on q's device, checked) where they are."""
    cp = _cp()
    cu_q, cu_k = (cp.ascontiguousarray(c) for c in vp.cu_given)
    return _Run(views.packed(q, D, cp), views.packed(k, D, cp), views.packed(v, D, cp),
                vp.batch, vp.Hq, vp.Hq // vp.Hkv, vp.max_seqlen_q, vp.max_seqlen_k, cu_q, cu_k)


@dataclasses.dataclass(frozen=True)
class CacheRows:
    """Where a decode step's keys are (kernels_cu/params.cuh): sequence b has seqused_k[b] +
    seqused_add keys (int32 (batch,) on the device; seqused_add: the tokens appended this call),
    clamped to the capacity, from row 0 of k and v (batch, kv heads, capacity, d), or, with
    block_table (int32 (batch, W) on the device), in pages of page_size rows (a power of two and a
    multiple of the tile's block_n) of a pool k, v (num_pages, kv heads, page_size, d).
    new_strides: the strides (views.strides) of k_new and v_new (batch, kv heads, seqused_add, d)
    when the launch reads the appended keys from them and writes them into the cache (the
    arrays come with each call), None when they are in the cache already."""

    seqused_k: object
    block_table: object = None
    page_size: int = 0
    seqused_add: int = 0
    num_pages: int = 0
    new_strides: tuple | None = None

    @property
    def kind(self) -> str:
        return "cache" if self.block_table is None else "paged"

    def fields(self) -> dict:
        new = {} if self.new_strides is None else dict(k_new_stride=list(self.new_strides[0]),
                                                       v_new_stride=list(self.new_strides[1]))
        if self.block_table is None:
            return dict(_NO_CACHE, seqused_k=self.seqused_k, seqused_add=self.seqused_add, **new)
        return dict(_NO_CACHE, seqused_k=self.seqused_k, block_table=self.block_table,
                    table_stride=int(self.block_table.strides[0] // self.block_table.itemsize),
                    page_shift=int(self.page_size).bit_length() - 1,
                    seqused_add=self.seqused_add, num_pages=self.num_pages, **new)


#: The forward's KV-cache fields without a cache
_NO_CACHE = dict(seqused_k=None, block_table=None, table_stride=0, page_shift=0, seqused_add=0,
                 num_pages=0, k_new=None, v_new=None, k_new_stride=[0, 0, 0],
                 v_new_stride=[0, 0, 0])


def _c_strides(shape, is_packed: bool) -> list:
    """views.strides of a new C-contiguous array of `shape`, without making one."""
    inner = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    return [0, inner[1], inner[0]] if is_packed else inner[:3]


class ForwardLaunch:
    """One forward pass, prepared once: the kernel, the grid, and the parameter struct with every
    field but the arrays' addresses (split-KV's counters, made here, stay in it). Calling it with arrays laid out
    as those it was made from allocates out and lse, fills in the addresses and launches: what
    _forward does per call, and what a decode loop repeats for arrays of one layout (kvcache
    keeps these per call signature, so that a step costs little host time).

    out_shape, lse_shape: the shapes out and lse are allocated with (default: the kernels' own,
    r.q.shape and r.rows()); C-contiguous either way, so any shape of the same size and order
    (a GQA fold's (B, Hq, 1, d) for the kernels' (B, Hkv, G, d)) serves."""

    def __init__(self, r: _Run, p, tile, D, num_splits=1, cache: CacheRows | None = None,
                 out_shape=None, lse_shape=None, auto_splits: bool = False, max_cluster: int = 1):
        dt = dtype_name(r.q.dtype)
        self.dtype, self.acc = r.q.dtype, accum_dtype(r.q.dtype)
        kernel_lse_shape, lse_stride = r.rows()
        self.out_shape = tuple(r.q.shape) if out_shape is None else tuple(out_shape)
        self.lse_shape = kernel_lse_shape if lse_shape is None else tuple(lse_shape)
        self.rows = r.batch * r.heads
        self.idle = self.rows == 0 or r.T == 0
        if self.idle:
            return
        variant = r.variant(p)
        if cache is not None:
            variant = dataclasses.replace(variant, cache=cache.kind)
        dev = _cp().cuda.Device().id
        if cache is not None or num_splits != 1:
            tile = plan.without_producer(tile, D)   # split-KV and caches: an 8-warp kernel
        elif plan.copy_engine_only(tile) and not r.packed and not _mappable(r, tile):
            tile = plan.without_tensor_maps(tile, D)
        self.q_tiles = math.ceil(r.T / tile.block_m)
        if num_splits is None:
            auto_splits = True
            num_splits = num_splits_for(self.q_tiles, self.rows, math.ceil(r.S / tile.block_n),
                                        dev)
        spec = lambda n: _specs(dt, D, tile, dataclasses.replace(variant, split=n > 1), False)[0]
        self.spec = spec(num_splits)
        if num_splits > 1:   # what the kernel's shared memory lets its merge take
            cap = _merge_split_cap(self.spec, self.acc.itemsize)
            if num_splits > cap and not auto_splits:
                raise ValueError(
                    f"num_splits={num_splits}: the kernel of tile {tile} at head dim {D} merges "
                    f"at most {cap} splits in its shared memory (fewer splits, or a larger tile)")
            if num_splits > cap:
                num_splits = max(1, cap)
                self.spec = spec(num_splits)
        self.num_splits = num_splits
        # split-KV's splits as one thread-block cluster of at most max_cluster blocks, which
        # merge through their shared memory where it holds their partials (plan.cluster_spec;
        # kernels_cu/split_combine.cuh)
        if num_splits > 1:
            self.spec = plan.cluster_spec(self.spec, num_splits, device_arch(dev), max_cluster,
                                          smem_limit(dev))
        self.cluster = self.spec.variant.cluster
        self.kern, self.smem, resident = _ready(self.spec, dev)
        self.threads = self.spec.threads()
        if num_splits > 1 and self.cluster == 1 and \
                self.q_tiles * num_splits * self.rows <= sm_count(dev):
            # a grid of at most one block an SM: more shared memory takes no block's place, and
            # the merging block stages every split in one round (merge_room_bytes, NOTES v104)
            room = merge_room_bytes(num_splits, min(r.T, tile.block_m), self.threads // 32,
                                    self.acc.itemsize)
            if self.smem < room <= smem_limit(dev):
                self.smem = room
                _allow_smem(self.kern, dev)
        split_rows = math.prod(kernel_lse_shape)
        # one allocation per call: out, lse and (split-KV) the partials, each 256-byte aligned
        parts = [math.prod(self.out_shape) * self.dtype.itemsize,
                 math.prod(self.lse_shape) * self.acc.itemsize]
        # split-KV merged through L2: the partials (a cluster's stay in its shared memory)
        self.l2_merge = num_splits > 1 and self.cluster == 1
        if self.l2_merge:
            parts += [num_splits * split_rows * D * self.acc.itemsize,
                      num_splits * split_rows * self.acc.itemsize]
        self.offsets, at = [], 0
        for n in parts:
            self.offsets.append(at)
            at += -(-n // 256) * 256
        self.nbytes = at
        # split-KV's count of finished splits per query tile (split_combine.cuh), one array per
        # stream: zero when made and left zero by every launch, so calls on one stream (which
        # run one after the other) share it, and a kept launch (kvcache) reuses it
        self.counters = {}
        # no arrays of this call stay in the struct or here (a kept launch must not keep a
        # caller's cache alive): their addresses come with each call
        maps = self._tensor_maps(r, dt, tile)
        if plan.copy_engine_only(tile) and not maps["tma_loads"]:   # its loads need the maps
            raise RuntimeError(f"tile {tile.short()} loads by the copy engine only, and this run "
                               f"has no tensor maps (plan.without_tensor_maps was not applied)")
        self.fields = dict(**maps,
                           q=None, k=None, v=None, out=None, lse=None, q_stride=r.strides(r.q),
                           k_stride=r.strides(r.k), v_stride=r.strides(r.v),
                           out_stride=_c_strides(r.q.shape, r.packed),
                           out_accum=None, lse_accum=None, split_rows=split_rows,
                           split_counter=None,
                           **(_NO_CACHE if cache is None else
                              dict(cache.fields(), seqused_k=None, block_table=None)),
                           **_common(p, batch=r.batch, heads=r.heads, group=r.group, T=r.T,
                                     S=r.S, d=D, acc=self.acc, cu_q=r.cu_q, cu_k=r.cu_k,
                                     lse_stride=lse_stride, num_splits=num_splits,
                                     itemsize=self.dtype.itemsize, device_id=dev,
                                     wave_q=resident))
        self.layout = params.layout("fwd", dt)
        self.mod = getattr(p, "mask_mod", None)
        self.T, self.S = r.T, r.S
        self.template = self.layout.pack(self.fields).tobytes()
        # the per-call path (__call__): the struct as 64-bit words, the slots of the addresses
        # it takes per call, the kernel's function (kept, so its module stays loaded) and grid
        self.words = ctypes.c_uint64 * (len(self.template) // 8)
        self.local = threading.local()   # .held: this thread's _struct()
        slot = self.layout.word_slots
        self.tma_slot = self.layout.offset("tma") // 8
        self.slots = tuple(slot[n] for n in ("q", "k", "v", "out", "lse"))
        self.split_slots = tuple(slot[n] for n in ("out_accum", "lse_accum", "split_counter"))
        self.cache_slots = tuple(slot[n] for n in ("seqused_k", "block_table", "k_new", "v_new"))
        self.fn = getattr(self.kern, "kernel", self.kern)
        self.launch_kernel = _driver().launchKernel
        cp = _cp()
        self.cupy = (cp.cuda.alloc, cp.ndarray, cp.cuda.get_current_stream)
        self.grid = _grid(self.q_tiles * self.num_splits, self.rows)

    def __call__(self, q, k, v, seqused_k=None, block_table=None, k_new=None, v_new=None, *,
                 with_lse=True):
        """(out, lse) of arrays laid out as the ones this launch was made from (the kernels'
        views: r.q, r.k, r.v; a cache's seqused_k and block_table, and the keys and values it
        appends). with_lse=False: lse is written (the kernels need its room) but not returned
        as an array (None): one ndarray fewer per decode step. (A decode loop runs this per
        step: every line counts, NOTES v26.)"""
        if self.idle:
            return _empty(self.out_shape, self.dtype), _empty(self.lse_shape, self.acc)
        alloc, ndarray, current_stream = self.cupy
        mem = alloc(self.nbytes)
        base = mem.ptr
        out = ndarray(self.out_shape, self.dtype, mem)
        lse_at = base + self.offsets[1]
        lse = ndarray(self.lse_shape, self.acc, mem + self.offsets[1]) if with_lse else None
        stream = current_stream().ptr
        if _POISON[-1]:   # everything the kernels should write, NaN first
            rest = (self.nbytes - self.offsets[1]) // self.acc.itemsize
            out.fill(float("nan"))
            ndarray((rest,), self.acc, mem + self.offsets[1]).fill(float("nan"))
        if self.mod is not None:
            return out, self._launch_mod(q, k, v, seqused_k, block_table, k_new, v_new, out,
                                         lse_at, base, stream, lse)
        # this thread's copy of the struct: every word but the addresses is the template's, and
        # every address slot is written below (cuLaunchKernel copies the struct when called)
        held = getattr(self.local, "held", None)
        if held is None:
            held = self._struct()
        w, arg = held[0], held[1]
        iq, ik, iv, io, il = self.slots
        w[iq], w[ik], w[iv], w[io], w[il] = q.data.ptr, k.data.ptr, v.data.ptr, base, lse_at
        if self.maps is not None:   # the copy engine's maps of these q, k, v
            self.maps.write(w, self.tma_slot, (w[iq], w[ik], w[iv]))
        if self.l2_merge:
            ia, ib, ic = self.split_slots
            w[ia], w[ib] = base + self.offsets[2], base + self.offsets[3]
            w[ic] = self._counter(stream)
        if seqused_k is not None:
            i0, i1, i2, i3 = self.cache_slots
            w[i0] = seqused_k.data.ptr
            w[i1] = 0 if block_table is None else block_table.data.ptr
            if k_new is None:
                w[i2] = w[i3] = 0
            else:
                w[i2], w[i3] = k_new.data.ptr, v_new.data.ptr
        gx, gy, gz = self.grid
        self.launch_kernel(self.fn.ptr, gx, gy, gz, self.threads, 1, 1, self.smem, stream, arg, 0)
        return out, lse

    def _tensor_maps(self, r: _Run, dt: str, tile) -> dict:
        """The tma and tma_loads fields (params.cuh): tensor maps of q, k and v for a
        warp-specialized forward's copy-engine loads (kernels_cu/tma.cuh), made from r's arrays
        and kept as self.maps (each call writes its own arrays' maps: TileMaps.write); none, and
        the kernel's cp.async loads, for other kernels, packed batches and arrays the copy engine
        cannot read (tma.map_shape: e.g. a broadcast axis), and the float32 forwards, whose
        producers copy by cp.async (spec.reads_tensor_maps)."""
        self.maps = None
        if not self.spec.reads_tensor_maps or r.packed:
            return tma.no_maps(3)
        bind_context()   # the driver encodes maps in the thread's current context
        self.maps, fields = tma.map_fields(dt, [
            _map_entry(r, r.q, tile.block_m), _map_entry(r, r.k, tile.block_n, keys=True),
            _map_entry(r, r.v, tile.block_n, keys=True)], 3)
        return fields

    def _struct(self):
        """(the calling thread's struct words, the address of its kernelParams array, that
        array), made from the template on the thread's first call, which also binds the
        thread's context (bind_context)."""
        bind_context()
        w = self.words.from_buffer_copy(self.template)
        ptr = _ONE_POINTER(ctypes.addressof(w))
        self.local.held = held = (w, ctypes.addressof(ptr), ptr)
        return held

    def _counter(self, stream: int) -> int:
        """The address of split-KV's tile counters for a stream (made zero on first use)."""
        counter = self.counters.get(stream)
        if counter is None:
            counter = self.counters[stream] = _cp().zeros(self.rows * self.q_tiles, np.int32)
        return counter.data.ptr

    def _launch_mod(self, q, k, v, seqused_k, block_table, k_new, v_new, out, lse_at, base,
                    stream, lse):
        """A mask_mod's launch (its captures travel as extra kernel arguments: _args)."""
        ptrs = dict(q=q, k=k, v=v, out=out, lse=lse_at)
        if self.l2_merge:
            ptrs.update(out_accum=base + self.offsets[2], lse_accum=base + self.offsets[3],
                        split_counter=self._counter(stream))
        if seqused_k is not None:
            ptrs.update(seqused_k=seqused_k, block_table=block_table, k_new=k_new, v_new=v_new)
        fields = dict(self.fields, **ptrs)
        packed, keep = self.layout.pack(fields), []
        args = _args(self.spec, packed, self.layout, fields, self.mod, self.T, self.S, keep)
        _launch(self.kern, self.smem, self.threads, self.q_tiles * self.num_splits, self.rows,
                args, stream)
        return lse


def _forward(r: _Run, p, tile, D, num_splits=1, cache: CacheRows | None = None,
             before_launch=None):
    """out (shaped like r.q) and lse (r.rows()) of one run. num_splits: split-KV's splits (None:
    num_splits_for's, capped by merge_split_cap); with more than one, each split writes float
    partials that the last of a tile's splits merges (split_combine.cuh). cache:
    the keys come from a KV cache (r.S: its capacity per sequence). before_launch: called once
    the launch is prepared, before anything is allocated or launched (a varlen call's deferred
    checks: checks._PendingSeqLens)."""
    if tile.kernel in plan.FLOAT32_WGMMA_FORWARDS:   # dense batches in one pass
        if cache is not None or r.packed or num_splits not in (1, None):
            raise ValueError(f"TileConfig {tile.short()}: kernel={tile.kernel!r} runs dense "
                             f"batches in one pass: no KV cache, packed batch or split-KV "
                             f"(kernel={plan.FLOAT32_WGMMA_FORWARDS[tile.kernel]!r} runs them)")
        num_splits = 1
    if tile.kernel == "wgmma_tf32":   # its K and Vᵀ staged first (tf32_stage)
        r = tf32_stage.staged_run(r, tile.block_n)
    elif tile.kernel in F16_SPLIT:   # K and V split first (f16x3_stage)
        r = f16x3_stage.staged_run(r, tile.block_n, plan.head_dim_pad(D, tile.kernel),
                                   lo=f16x3_stage.carries_lo(tile.kernel))
    launch = ForwardLaunch(r, p, tile, D, num_splits, cache)
    if before_launch is not None:
        before_launch()
    if cache is None:
        return launch(r.q, r.k, r.v)
    return launch(r.q, r.k, r.v, cache.seqused_k, cache.block_table)


def _mappable(r: _Run, tile) -> bool:
    """Whether the copy engine can read a forward's q, k and v (tma.map_shape)."""
    return all(tma.map_shape(shape, strides, x.dtype.itemsize) is not None
               for x, (_, shape, strides, _) in (
                   (r.q, _map_entry(r, r.q, tile.block_m)),
                   (r.k, _map_entry(r, r.k, tile.block_n, keys=True)),
                   (r.v, _map_entry(r, r.v, tile.block_n, keys=True))))


def _map_entry(r: _Run, x, box_rows: int, keys: bool = False):
    """tma.map_fields' entry of one of a run's arrays: x's address, its (sequences, heads, rows,
    d) shape as the kernels index it (q-shaped: heads, T rows; keys: kv heads, S rows), its
    element strides and the box's rows."""
    heads, rows = (r.heads // r.group, r.S) if keys else (r.heads, r.T)
    return views.address(x), (r.batch, heads, rows, x.shape[-1]), r.strides(x), box_rows


def _backward_maps(r: _Run, dout, dt: str, dkdv, dq_accum=None):
    """(r, dout, the tma and tma_loads fields) of a backward: tensor maps of q, k, v and dout in
    boxes of 64 rows (one set serves the warp-specialized dK/dV kernel, whose 64-row query and
    128-row key tiles come by the copy engine only, and its dQ kernel, tiles the other way round)
    and, given dq_accum (the atomic-dQ kernel's float (batch, heads, T, D)), one of it in boxes of
    64 rows × 32 floats that the kernel's reductions go through, when the dK/dV kernel reads
    tensor maps (spec.reads_tensor_maps: the 16-bit warp-specialized one) and the run is not
    packed; where an array cannot be mapped (tma.map_shape: a
    broadcast axis) r and dout come back as C-contiguous copies, which can. No maps otherwise
    (cp.async loads, red.global reductions)."""
    if not dkdv.reads_tensor_maps or r.packed or r.S == 0 or r.T == 0:   # (no dK/dV launch)
        return r, dout, tma.no_maps(5)
    bind_context()   # the driver encodes maps in the thread's current context

    def maps(r, dout):
        arrays = [_map_entry(r, r.q, 64), _map_entry(r, r.k, 64, keys=True),
                  _map_entry(r, r.v, 64, keys=True), _map_entry(r, dout, 64)]
        if dq_accum is not None:
            arrays.append((views.address(dq_accum), dq_accum.shape, views.strides(dq_accum), 64,
                           "float32"))
        return tma.map_fields(dt, arrays, 5)

    made, fields = maps(r, dout)
    if made is None:
        cp = _cp()
        r = dataclasses.replace(r, q=cp.ascontiguousarray(r.q), k=cp.ascontiguousarray(r.k),
                                v=cp.ascontiguousarray(r.v))
        dout = cp.ascontiguousarray(dout)
        made, fields = maps(r, dout)
        if made is None:
            raise RuntimeError("no tensor maps for C-contiguous copies of q, k, v and dout "
                               f"(shapes {r.q.shape}, {r.k.shape})")
    return r, dout, fields


def _backward(r: _Run, dout, out, lse, p, tile, D, deterministic):
    """(dq, dk, dv) shaped like r.q, r.k, r.v (dk, dv summed over each kv head's group)."""
    cp = _cp()
    specs = _specs(dtype_name(r.q.dtype), D, tile, r.variant(p), True, deterministic)
    dev = cp.cuda.Device().id
    dkdv = specs[0]
    lse_shape, lse_stride = r.rows()
    dk, dv = r.k_like(), r.k_like()
    dq = r.q_like()
    # the gradients' factors (params.cuh); tile.F16_SCALED: the 16-bit pair on float16 copies
    # (f16_scaled), its own softmax scale and factors, float32 gradients
    kernel_scale, factors = p.scale, dict(dq_scale=p.scale, dk_scale=p.scale, dv_scale=1.0)
    if tile.kernel == F16_SCALED:
        c = f16_scaled.cast(r.q, r.k, r.v, out, dout, p.scale)
        r, out, dout = dataclasses.replace(r, q=c.q, k=c.k, v=c.v), c.out, c.dout
        kernel_scale = c.factors.kernel_scale
        factors = dict(dq_scale=c.factors.dq, dk_scale=c.factors.dk, dv_scale=c.factors.dv)
    dt = dtype_name(r.q.dtype)
    acc = accum_dtype(r.q.dtype)
    factors = {k: acc.type(v) for k, v in factors.items()}
    lse = cp.ascontiguousarray(lse, dtype=acc).reshape(lse_shape)
    Dsum = _empty(lse_shape, acc)
    atomic = dkdv.atomic_dq
    dq_accum = cp.zeros(lse_shape + (D,), dtype=acc) if atomic else None
    key_tiles = math.ceil(r.S / tile.block_n)
    # GQA: a kv head's G query heads in `ranks` blocks per key tile, summed in a fixed order
    # through float accumulators shaped like dk and dv and one counter per (sequence, kv head,
    # key tile) when there is more than one
    kv_rows = r.batch * (r.heads // r.group)
    rows = r.batch * r.heads
    if rows == 0:
        return dq, dk, dv
    kern_kv, smem_kv, wave_k = _ready(dkdv, dev)
    kern_q, smem_q, wave_q = (None, 0, 1) if atomic else _ready(specs[1], dev)
    ranks = _group_ranks(r.group, key_tiles * kv_rows, wave_k)
    group_sum = ranks > 1
    dk_accum = _empty(dk.shape, acc) if group_sum else None
    dv_accum = _empty(dv.shape, acc) if group_sum else None
    dkdv_sem = cp.zeros(kv_rows * key_tiles, dtype=np.int32) if group_sum else None
    r, dout, maps = _backward_maps(r, dout, dt, dkdv, dq_accum)
    fields = dict(**maps,
                  q=r.q, k=r.k, v=r.v, out=out, dout=dout, lse=lse, D=Dsum, dq=dq, dk=dk, dv=dv,
                  dq_accum=dq_accum, dk_accum=dk_accum, dv_accum=dv_accum, dkdv_sem=dkdv_sem,
                  group_chunk=r.group // ranks,
                  q_stride=r.strides(r.q), k_stride=r.strides(r.k),
                  v_stride=r.strides(r.v), out_stride=r.strides(out),
                  dout_stride=r.strides(dout), dq_stride=r.strides(dq), dk_stride=r.strides(dk),
                  dv_stride=r.strides(dv), **factors,
                  **_common(p, batch=r.batch, heads=r.heads, group=r.group, T=r.T, S=r.S, d=D,
                            acc=acc, cu_q=r.cu_q, cu_k=r.cu_k, lse_stride=lse_stride,
                            itemsize=r.q.dtype.itemsize, device_id=dev, wave_q=wave_q,
                            wave_k=wave_k, scale=kernel_scale))
    layout, keep, mod = params.layout("bwd", dt), [], getattr(p, "mask_mod", None)
    packed = layout.pack(fields)   # one struct serves the three launches (without a mask_mod)
    # -- D = rowsum(dO ∘ O): build.PREPROCESS_ROWS query rows per block
    _launch(build.get_preprocess(dt, dev, r.packed), 0, 256,
            math.ceil(r.T / build.PREPROCESS_ROWS), rows, packed)
    if dkdv.family in F16_SPLIT:   # the pair reads q, k, v and dout split once (f16x3_stage)
        fields.update(f16x3_stage.backward_fields(r, dout, plan.head_dim_pad(D, dkdv.family),
                                                  [s.tile for s in specs],
                                                  lo=f16x3_stage.carries_lo(dkdv.family)))
        packed = layout.pack(fields)
    # -- dK, dV (and dQ by atomics): one block per key tile, (sequence, kv head) and rank
    _launch(kern_kv, smem_kv, dkdv.threads(), key_tiles, kv_rows * ranks,
            _args(dkdv, packed, layout, fields, mod, r.T, r.S, keep))
    if atomic:
        rows_dq = dq_accum.astype(dq.dtype)   # lse's rows: (batch, heads, T) or (heads, total_q)
        dq[...] = rows_dq.transpose(1, 0, 2) if r.packed else rows_dq
        return dq, dk, dv
    # -- dQ in a fixed order
    _launch(kern_q, smem_q, specs[1].threads(), math.ceil(r.T / specs[1].tile.block_m), rows,
            _args(specs[1], packed, layout, fields, mod, r.T, r.S, keep))
    return dq, dk, dv


def forward(q, k, v, p, *, tile, num_splits=1):
    """out (lead..., T, d_v) in q's dtype and lse (lead..., T), float32 (float64 for float64
    inputs), of cuflash.attention's checked arrays (`p`: their checks.Problem); num_splits:
    split-KV (None: automatic, num_splits_for)."""
    D = p.kernel_d
    r = _dense_run(q, k, v, p, D)
    out, lse = _forward(r, p, tile, D, num_splits)
    out = checks.unpad(out, p.dv, _cp())
    return out.reshape(p.lead + (p.T, p.dv)), lse.reshape(p.lead + (p.T,))


def kvcache_launch(q, k, v, p, cache: CacheRows, *, tile, group: int, num_splits=None,
                   out_shape=None, lse_shape=None, auto_splits=False,
                   max_cluster=1) -> ForwardLaunch:
    """The ForwardLaunch of decode queries q (B, H, T, d) over a KV cache: k, v (B, H / group,
    capacity, d), or a page pool (pages, H / group, page_size, d) read in place through
    cache.block_table; sequence b has cache_keys (seqused_k[b] + seqused_add, clamped) keys and
    its T queries are the last T of them (masks bottom-right aligned per sequence). ``p``: the
    options as checks.Problem holds them (mask, scale, softcap, alibi_slopes of the (b, h) pairs
    in order b·H + h, or None). Called with (q, k, v, seqused_k, block_table) it returns out
    (B, H, T, d) in q's dtype and lse (B, H, T) (or out_shape, lse_shape). Automatic splits
    (num_splits None): num_splits_for's (kvcache passes its own, _decode_split's, with
    auto_splits=True: capped, not refused, where the kernel's merge takes fewer). max_cluster:
    the splits merge in thread-block clusters of up to this many blocks where the kernel can
    (plan.split_cluster)."""
    B, H, T, D = q.shape
    if cache.block_table is not None and (cache.page_size & (cache.page_size - 1) or
                                          cache.page_size % plan.page_rows(tile)):
        raise ValueError(f"page_size={cache.page_size}: the KV-cache kernels read a paged cache "
                         f"in place only with pages of a power of two of tokens that hold whole "
                         f"runs of the {plan.page_rows(tile)} keys one copy reads "
                         f"(TileConfig block_n={tile.block_n}, num_warps={tile.num_warps}: "
                         f"plan.page_rows)")
    S = k.shape[2] if cache.block_table is None else cache.block_table.shape[1] * cache.page_size
    return ForwardLaunch(_Run(q, k, v, B, H, group, T, S), p, tile, D, num_splits, cache,
                         out_shape, lse_shape, auto_splits, max_cluster)


def forward_kvcache(q, k, v, p, cache: CacheRows, *, tile, group: int, num_splits=None):
    """out (B, H, T, d) in q's dtype and lse (B, H, T) of decode queries over a KV cache in one
    launch (and split-KV's merge): kvcache_launch's, called once."""
    launch = kvcache_launch(q, k, v, p, cache, tile=tile, group=group, num_splits=num_splits)
    return launch(q, k, v, cache.seqused_k, cache.block_table)


def backward(dout, q, k, v, out, lse, p, *, tile, deterministic):
    """(dq, dk, dv) shaped like q, k, v: P recomputed from q, k and lse; gradients summed over
    each kv head's query heads by the kernels, over broadcast leading dims afterwards."""
    cp = _cp()
    D = p.kernel_d
    r = _dense_run(q, k, v, p, D)
    bshape = p.lead[:-1]
    do4, o4 = (views.bhnd(x, bshape, p.heads, D, cp) for x in (dout, out))
    dq, dk, dv = _backward(r, do4, o4, lse, p, tile, D, deterministic)
    hk = r.heads // r.group
    grads = (checks.unpad(dq, p.d, cp).reshape(p.lead + (p.T, p.d)),
             checks.unpad(dk, p.d, cp).reshape(bshape + (hk, p.S, p.d)),
             checks.unpad(dv, p.dv, cp).reshape(bshape + (hk, p.S, p.dv)))
    return tuple(checks.unbroadcast(g, x.shape, cp) for g, x in zip(grads, (q, k, v)))


def forward_packed(q, k, v, vp, *, tile):
    """out (total_q, Hq, d_v) and lse (Hq, total_q) of attention_varlen's checked arrays (`vp`:
    their checks.VarlenProblem), every sequence in one launch."""
    D = checks.kernel_head_dim(max(vp.d, vp.dv))
    out, lse = _forward(_packed_run(q, k, v, vp, D), vp, tile, D,
                        before_launch=vp.lens.resolve)
    return checks.unpad(out, vp.dv, _cp()), lse


def backward_packed(dout, q, k, v, out, lse, vp, *, tile, deterministic):
    """(dq, dk, dv) shaped like the packed q, k, v."""
    cp = _cp()
    D = checks.kernel_head_dim(max(vp.d, vp.dv))
    r = _packed_run(q, k, v, vp, D)
    do3, o3 = (views.packed(x, D, cp) for x in (dout, out))
    dq, dk, dv = _backward(r, do3, o3, lse, vp, tile, D, deterministic)
    return checks.unpad(dq, vp.d, cp), checks.unpad(dk, vp.d, cp), checks.unpad(dv, vp.dv, cp)
