"""Decoding with a KV cache: :func:`attention_with_kvcache` (after FlashAttention's
``flash_attn_with_kvcache``), :class:`PagedKVCache` (a page pool for research code) and the byte
arithmetic of KV caches (:func:`kv_cache_bytes`, :func:`cache_waste`, :func:`decode_step_bytes`).

Two cache layouts, both with the head axis before the token axis, as cuflash's (..., S, d):

* contiguous: ``k_cache`` (B, Hkv, S_max, d), sequence b's tokens at ``k_cache[b, :, :len]``;
* paged: ``k_cache`` (num_pages, Hkv, page_size, d) and ``block_table`` int32 (B, W): token t of
  sequence b is slot ``t % page_size`` of page ``block_table[b, t // page_size]``.

Sequence b holds ``cache_seqlens[b]`` tokens before the call; ``k_new``/``v_new`` (Tnew tokens
each) are written behind them, and the Tq queries are the last Tq positions of the sequence of
``cache_seqlens[b] + Tnew`` tokens (causal masks and windows aligned to the bottom-right corner
per sequence, as :func:`cuflash.attention` does for one sequence).

On CuPy, with a head dim the kernels run as it is (a multiple of 8 from 16 to 256), a decode
step is one launch of the forward kernels' KV-cache variant (split-KV merged in it too): each
sequence's key count read from the device; k_new and v_new read by the kernels in place of the
cache rows they will fill, and written into the cache by the same launch; a paged cache read in
place through block_table (16-bit inputs: pages of any allowed size, the decode tile taking
min(64, page) keys; float32/float64: pages holding whole tiles of the default tile's keys); and
with Tq = 1, no ALiBi and no left window bound, the G query heads of a GQA group folded into the
rows of one query tile, so that their shared K/V is read once. Calls of one signature reuse one
prepared launch (_KernelPlan). Otherwise (NumPy: the CPU twin; other head dims, or pages smaller than a
float32/float64 tile's keys) the attention runs per group of sequences of equal length through
:func:`cuflash.attention`, gathering paged sequences first: the reference the kernel path is
checked against (``_IN_KERNEL = False`` forces it).
"""
from __future__ import annotations

import dataclasses
import functools
import numbers

import numpy as np

from . import checks
from ._xp import DTYPES, accum_dtype, array_module, dtype_name, is_cupy_array, resolve_dtype
from .api import attention
from .mask import Mask

#: Smallest page size of the paged layout; page sizes are powers of two from here up.
MIN_PAGE_SIZE = 16

#: How the query heads of a GQA group meet their shared K/V (tests force each; None = automatic,
#: see :func:`_attend_length`): "fold", "broadcast" or "loop".
_GQA_STRATEGY = None

#: Whether CuPy calls may take the one-launch kernel path (tests set False for the reference)
_IN_KERNEL = True

#: Decode steps' split-KV (_decode_split): the grid is split up to this many blocks per SM
DECODE_FILL = 1
#: ... and into at most this many splits per query tile: 64, not 128, where one or two query
#: tiles would fill the SMs with splits of a few key tiles each (B·Hkv = 1 at 16k-64k:
#: 0.88-0.94x the step time of 128 splits; 2 x 1 and 1 x 2 at 32k 0.955-0.96; 8k and 128k
#: 0.994-0.997; NOTES v96, calls 264-266, H100)
DECODE_MAX_SPLITS = 64
#: ... each of at least this many key tiles
DECODE_MIN_TILES = 2
#: ... merged in one thread-block cluster where up to this many splits fill one (2, 4 or 8) and
#: the kernel can (sm_90, the 16-bit mma kernels; plan.split_cluster): 0.91-0.94x the step time
#: of the merge through L2 at B·Hkv = 1-8, S = 1k (NOTES v91). 1: through L2 always.
DECODE_CLUSTER = 8


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_))


def _page_size_ok(p: int) -> bool:
    return p >= MIN_PAGE_SIZE and p & (p - 1) == 0


def _page_size_error(name: str, p) -> str:
    return (f"{name}={p!r}: pages must hold a power of two >= {MIN_PAGE_SIZE} tokens "
            f"(16, 32, 64, ...)")


# -- checks --------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Call:
    """One checked call of attention_with_kvcache: shapes, host copies of the index arrays and
    the options in the form cuflash.attention takes them."""

    xp: object
    B: int
    Hq: int
    Hkv: int
    Tq: int
    Tnew: int
    d: int
    page_size: int               # 0 for the contiguous layout
    capacity: int                # tokens each sequence can hold (S_max, or pages · page_size)
    where: str                   # the capacity in words, for errors
    num_pages: int               # pages of the pool (paged), 0 for the contiguous layout
    options: dict                # causal, window, softcap, scale, num_splits for cuflash.attention
    mask: Mask
    slopes: object               # (B, Hkv, G) accumulation dtype on xp, or None
    seqlens: np.ndarray | None = None   # (B,) int64, host (_read_indices)
    table: np.ndarray | None = None     # (B, W) int64, host; None for the contiguous layout

    @property
    def group(self) -> int:
        return self.Hq // self.Hkv

    @property
    def lengths(self) -> np.ndarray:
        """(B,) tokens of each sequence after the append: what the queries attend over."""
        return self.seqlens + self.Tnew


def _check_device(arrays: dict) -> None:
    """CuPy arrays must all live on one GPU."""
    ids = {name: a.device.id for name, a in arrays.items() if is_cupy_array(a)}
    if len(set(ids.values())) > 1:
        desc = ", ".join(f"{n}: GPU {i}" for n, i in ids.items())
        raise TypeError(f"arrays on different GPUs ({desc}); move them to one device first")


def _check_rank(name, a, shape_text) -> None:
    if a.ndim != 4:
        raise ValueError(f"{name} must have 4 dims {shape_text}, got shape {tuple(a.shape)}")


def _check_index_array(name, a, shape, shape_text) -> None:
    if a.dtype != np.int32:
        raise TypeError(f"{name} must have dtype int32, got {dtype_name(a.dtype)}")
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} {shape_text}, got "
                         f"{tuple(a.shape)}")


def _check_call(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, *, causal,
                window, softcap, alibi_slopes, scale, return_lse, num_splits) -> _Call:
    """Every check of attention_with_kvcache, before anything is written."""
    if (k_new is None) != (v_new is None):
        given, missing = ("k_new", "v_new") if v_new is None else ("v_new", "k_new")
        raise ValueError(f"{given} was given without {missing}: pass both or neither")
    arrays = dict(q=q, k_cache=k_cache, v_cache=v_cache, cache_seqlens=cache_seqlens)
    for name, a in (("block_table", block_table), ("k_new", k_new), ("v_new", v_new)):
        if a is not None:
            arrays[name] = a
    xp = array_module(**arrays)
    _check_device(arrays)
    _check_rank("q", q, "(batch, q_heads, Tq, head_dim)")
    _check_rank("k_cache", k_cache, "(batch, kv_heads, S_max, head_dim) or, paged, "
                "(num_pages, kv_heads, page_size, head_dim)")
    _check_rank("v_cache", v_cache, "shaped like k_cache")
    checks.check_dtype("q", q)
    for name in ("k_cache", "v_cache", "k_new", "v_new"):
        a = arrays.get(name)
        if a is not None and a.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {dtype_name(q.dtype)}, got "
                            f"{dtype_name(a.dtype)}")
    B, Hq, Tq, d = (int(n) for n in q.shape)
    checks.check_head_dim(d, f"head_dim={d} (q.shape[-1])")
    if tuple(v_cache.shape) != tuple(k_cache.shape):
        raise ValueError(f"v_cache must have k_cache's shape {tuple(k_cache.shape)}, got "
                         f"{tuple(v_cache.shape)}")
    if k_cache.shape[-1] != d:
        raise ValueError(f"k_cache.shape[-1]={k_cache.shape[-1]} must equal q's head_dim {d}")
    Hkv = int(k_cache.shape[1])
    if Hkv < 1:
        raise ValueError(f"k_cache has {Hkv} kv heads (k_cache.shape[1]); it needs at least 1")
    if Hq % Hkv:
        raise ValueError(f"q's {Hq} heads (q.shape[1]) must be a multiple of k_cache's {Hkv} kv "
                         f"heads (k_cache.shape[1]): query head h reads kv head h // (Hq // Hkv)")
    # -- layout
    if block_table is None:
        if k_cache.shape[0] != B:
            raise ValueError(f"k_cache.shape[0]={k_cache.shape[0]} must equal q's batch {B} "
                             f"(contiguous cache (batch, kv_heads, S_max, head_dim); pass "
                             f"block_table for a paged cache)")
        page_size, capacity, num_pages = 0, int(k_cache.shape[2]), 0
        where = f"the cache holds S_max={capacity} tokens per sequence (k_cache.shape[2])"
    else:
        if block_table.ndim != 2:
            raise ValueError(f"block_table must have 2 dims (batch, pages_per_sequence), got "
                             f"shape {tuple(block_table.shape)}")
        _check_index_array("block_table", block_table, (B, block_table.shape[1]),
                           "(batch, pages_per_sequence)")
        page_size = int(k_cache.shape[2])
        if not _page_size_ok(page_size):
            raise ValueError(_page_size_error("page_size (k_cache.shape[2])", page_size))
        width = int(block_table.shape[1])
        capacity, num_pages = width * page_size, int(k_cache.shape[0])
        where = (f"block_table gives each sequence {width} pages of {page_size} tokens "
                 f"({capacity} tokens)")
    _check_index_array("cache_seqlens", cache_seqlens, (B,), "(batch,)")
    Tnew = 0
    if k_new is not None:
        _check_rank("k_new", k_new, "(batch, kv_heads, Tnew, head_dim)")
        Tnew = int(k_new.shape[2])
        want = (B, Hkv, Tnew, d)
        for name, a in (("k_new", k_new), ("v_new", v_new)):
            if tuple(a.shape) != want:
                raise ValueError(f"{name} must have shape {want} (batch, kv_heads, Tnew, "
                                 f"head_dim), got {tuple(a.shape)}")
    # -- options
    mask = Mask.make(causal=causal, window=window)
    scale_f = checks.check_scale(scale, d, q.dtype)
    cap = checks.check_softcap(softcap, scale_f, q.dtype)
    slopes = checks.check_alibi(alibi_slopes, (B, Hq), q.dtype, xp,
                                max(Tq, capacity + Tnew) - 1)
    if slopes is not None:
        slopes = slopes.reshape(B, Hkv, Hq // Hkv)
    checks.check_bool("return_lse", return_lse)
    num_splits = checks.check_num_splits(num_splits)
    if Tnew:
        _check_writable(k_cache, v_cache, xp)
    return _Call(xp, B, Hq, Hkv, Tq, Tnew, d, page_size, capacity, where, num_pages,
                 dict(causal=bool(causal), window=window, softcap=cap, scale=scale_f,
                      num_splits=num_splits),
                 mask, slopes)


def _read_indices(c: _Call, cache_seqlens, block_table) -> _Call:
    """c with host copies of cache_seqlens and block_table (a device sync on CuPy), after the
    checks of their values: lengths within the capacity, the append within it, the pages in use
    inside the pool and a page written by the append owned by its sequence alone."""
    seqlens = np.asarray(cache_seqlens.get() if is_cupy_array(cache_seqlens) else cache_seqlens,
                         dtype=np.int64)
    table = None
    if block_table is not None:
        table = np.asarray(block_table.get() if is_cupy_array(block_table) else block_table,
                           dtype=np.int64)
    capacity, where, Tnew = c.capacity, c.where, c.Tnew
    bad = np.flatnonzero((seqlens < 0) | (seqlens > capacity))
    if bad.size:
        b = int(bad[0])
        raise ValueError(f"cache_seqlens[{b}]={seqlens[b]} is beyond the cache: it must be in "
                         f"0..{capacity}; {where}")
    over = np.flatnonzero(seqlens + Tnew > capacity)
    if over.size:
        b = int(over[0])
        what = "would overflow its pages" if table is not None else "would overflow the cache"
        raise ValueError(f"k_new: appending Tnew={Tnew} tokens to sequence {b} "
                         f"(cache_seqlens[{b}]={seqlens[b]}) {what}: it needs "
                         f"{seqlens[b] + Tnew} tokens, {where}")
    if table is not None:
        _check_table(table, seqlens, Tnew, c.page_size, c.num_pages)
    return dataclasses.replace(c, seqlens=seqlens, table=table)


def _check_table(table, seqlens, Tnew, page_size, num_pages) -> None:
    """The block_table entries a call reads or writes (the first ceil(length / page_size) of
    each row) must name pages of the pool, and a page written by the call must belong to no other
    entry in use (another sequence's tokens, or the same sequence's twice)."""
    B, W = table.shape
    needed = -(-(seqlens + Tnew) // page_size)                  # pages per sequence in use
    used = np.arange(W)[None, :] < needed[:, None]               # (B, W)
    bad = used & ((table < 0) | (table >= num_pages))
    if bad.any():
        b, c = (int(x) for x in np.argwhere(bad)[0])
        raise ValueError(f"block_table[{b}, {c}]={table[b, c]} points outside the page pool: "
                         f"pages are 0..{num_pages - 1} (k_cache.shape[0]={num_pages}); sequence "
                         f"{b} holds {seqlens[b] + Tnew} tokens after the append, in its first "
                         f"{needed[b]} pages")
    if not Tnew:
        return
    first = seqlens // page_size                                  # first page column written
    last = (seqlens + Tnew - 1) // page_size
    cols = np.arange(W)[None, :]
    written = used & (cols >= first[:, None]) & (cols <= last[:, None])
    pages, counts = np.unique(table[used], return_counts=True)
    shared = set(pages[counts > 1].tolist())
    hits = [tuple(int(x) for x in bc) for bc in np.argwhere(written)
            if int(table[tuple(bc)]) in shared]
    if hits:
        b, c = hits[0]
        p = int(table[b, c])
        others = [tuple(int(x) for x in bc) for bc in np.argwhere(used & (table == p))
                  if tuple(int(x) for x in bc) != (b, c)]
        raise ValueError(f"block_table[{b}, {c}]={p}: page {p} is written by this call (k_new "
                         f"appended to sequence {b}) but block_table{list(others[0])} uses it "
                         f"too; a page being appended to must belong to one sequence, once "
                         f"(copy a shared page before appending to it)")


def _check_writable(k_cache, v_cache, xp) -> None:
    for name, a in (("k_cache", k_cache), ("v_cache", v_cache)):
        if xp is np and not a.flags.writeable:
            raise ValueError(f"{name} is read-only; k_new and v_new are written into it in place")
    if _overlap(k_cache, v_cache):
        raise ValueError("k_cache and v_cache overlap in memory; k_new and v_new are written "
                         "into them in place, so they must be separate arrays")


def _extent(a, relative: bool = False) -> tuple:
    """[first byte, last byte + 1) of the memory an array's elements span (relative: from its
    first element's address, the same for every array of its shape and strides)."""
    lo = hi = 0 if relative else (a.__array_interface__["data"][0] if isinstance(a, np.ndarray)
                                  else a.data.ptr)
    for n, st in zip(a.shape, a.strides):
        if n > 1:
            if st > 0:
                hi += (n - 1) * st
            else:
                lo += (n - 1) * st
    return lo, hi + a.itemsize


def _overlap(a, b) -> bool:
    """Whether two non-empty arrays share an element's bytes: first their byte extents (NumPy's
    and CuPy's may_share_memory bound test, for either module, in a few integer operations),
    then, where those meet, NumPy's exact test on the two layouts alone (no element is read:
    K and V interleaved in one array, (..., S, 2, d)[..., 0, :] and [..., 1, :], do not
    overlap). A layout too intricate for that test to settle counts as overlapping."""
    if a.size == 0 or b.size == 0:
        return False
    if not _spans_overlap(_extent(a), _extent(b)):
        return False
    try:
        return bool(np.shares_memory(_layout(a), _layout(b), max_work=_EXACT_WORK))
    except np.exceptions.TooHardError:
        return True


#: the most candidate solutions np.shares_memory may try before _overlap gives up (overlap)
_EXACT_WORK = 1 << 16


class _Layout:
    """An array's address, shape, strides and item type as NumPy's array interface, for the
    exact overlap test (an ndarray over it is never read)."""

    def __init__(self, a):
        ptr = a.__array_interface__["data"][0] if isinstance(a, np.ndarray) else a.data.ptr
        self.__array_interface__ = {"shape": tuple(a.shape), "strides": tuple(a.strides),
                                    "typestr": f"|V{a.itemsize}", "data": (ptr, True),
                                    "version": 3}


def _layout(a) -> np.ndarray:
    return np.asarray(_Layout(a))


def _spans_overlap(a: tuple, b: tuple) -> bool:
    """Whether byte ranges [a0, a1) and [b0, b1) meet."""
    return a[0] < b[1] and b[0] < a[1]


# -- append and gather ---------------------------------------------------------------------------

def _append(c: _Call, k_cache, v_cache, k_new, v_new) -> None:
    """Write k_new, v_new (B, Hkv, Tnew, d) at positions cache_seqlens[b] + t, in place."""
    xp = c.xp
    pos = c.seqlens[:, None] + np.arange(c.Tnew)[None, :]                  # (B, Tnew)
    if c.table is None:
        first = np.broadcast_to(np.arange(c.B)[:, None], pos.shape)
        second = pos
    else:
        first = np.take_along_axis(c.table, pos // c.page_size, axis=1)    # page of each token
        second = pos % c.page_size
    first, second = xp.asarray(first), xp.asarray(second)
    # advanced indices on axes 0 and 2 around a slice: the indexed view is (B, Tnew, Hkv, d)
    k_cache[first, :, second] = xp.swapaxes(k_new, 1, 2)
    v_cache[first, :, second] = xp.swapaxes(v_new, 1, 2)


def _runs(idx: np.ndarray):
    """A slice for sorted indices that form one run (a view, no gather), else the indices."""
    return slice(int(idx[0]), int(idx[-1]) + 1) if idx[-1] - idx[0] + 1 == idx.size else idx


def _gather(c: _Call, cache, sel, idx, L: int):
    """(n, Hkv, L, d): the first L tokens of the sequences idx (``sel``: their slice or device
    index array) from a contiguous or paged cache."""
    if c.table is None:
        return cache[sel, :, :L]
    n_pages = -(-L // c.page_size)
    pages = c.xp.asarray(c.table[idx, :n_pages])                           # (n, n_pages)
    blocks = cache[pages]                                                   # (n, np, Hkv, P, d)
    n = len(idx)
    full = c.xp.swapaxes(blocks, 1, 2).reshape(n, c.Hkv, n_pages * c.page_size, c.d)
    return full[:, :, :L]


# -- one launch over the whole batch (CuPy) -------------------------------------------------------

#: A TileConfig that every decode step takes instead of _decode_tile's (benchmarks set it)
DECODE_TILE = None
#: above this head dim (kernel head dim 256) a 32-row decode tile takes DECODE_WIDE_KEYS keys:
#: each warp's 16 x 64 scores beside O's 16 x 256 floats spill 16-252 bytes (NVRTC 13.0, sm_80
#: and sm_90), 16 x 32 none; up to d = 224 64 keys compile without spills (NOTES v94)
DECODE_WIDE_D = 224
DECODE_WIDE_KEYS = 32


def _decode_split(blocks: int, key_tiles: int, sms: int, fill: int = None,
                  max_splits: int = None, min_tiles: int = None) -> tuple:
    """(splits, ring stages) of a decode step whose grid has `blocks` query tiles, each over
    `key_tiles` key tiles, on `sms` SMs; fill, max_splits and min_tiles default to DECODE_FILL,
    DECODE_MAX_SPLITS and DECODE_MIN_TILES.

    - More than fill·sms query tiles: no split (no partials to merge).
    - Else as many splits as keep the grid within fill blocks per SM, at least min_tiles key
      tiles each and at most max_splits.
    - The ring: 3 stages (two tiles in flight per block) where the grid is at most one block per
      SM (a block alone on its SM) or more than two (its depth is then in waves of blocks), 2
      stages between (three blocks fit per SM).

    Measured on the H200 (d = 128, float16, 1 to 512 kv heads, S = 1k to 128k): grids of more
    than 2 blocks per SM but under 3 per SM, or of 1.3-1.5 waves, read up to 25% slower than the
    same step's grid of at most 2 per SM (NOTES v27, call 102); on the swizzled KV-cache tiles,
    one block per SM reads as well as two or better (fill 1 against 2: 0.986-1.14 per cell, two
    passes; B·Hkv = 8 at S = 8k 1.14, 16·8 at S = 1k 1.13; NOTES v28, call 113)."""
    fill = DECODE_FILL if fill is None else fill
    max_splits = DECODE_MAX_SPLITS if max_splits is None else max_splits
    min_tiles = DECODE_MIN_TILES if min_tiles is None else min_tiles
    # (more than fill·sms query tiles: fill·sms // blocks is 0, one split)
    splits = max(1, min(max_splits, fill * sms // max(blocks, 1), key_tiles // min_tiles))
    grid = blocks * splits
    return splits, (3 if grid <= sms or grid > 2 * sms else 2)


def _decode_tile(c: _Call, dtype, rows: int, stages: int = 2):
    """The tile of a decode step with `rows` query rows per (sequence, head): 16-bit inputs take
    the mma kernel with 16 or 32 rows and 64 keys per tile (tools/bench_kvcache.py, NOTES v10;
    16 rows: warps of 16 keys splitting the tile, each staging its own keys from its own page,
    so pages of 16 and 32 keep the 64-key tile, NOTES v26, v101; 32 rows above DECODE_WIDE_D: 32
    keys, NOTES v94) and a ring of `stages` K/V stages (2 or 3: _decode_split), or with 32 rows a
    page's keys when pages hold fewer (16 or 32: every tile lies in one page, so pages of any
    size the layout allows are read in place); float64 the default tile,
    float32 the CUDA cores' (precision 'ieee'). None when no tile fits the paged cache's pages or
    the device (the caller falls back to the reference path)."""
    from .gpu import ops
    return _tile_for(dtype_name(dtype), c.d, rows, DECODE_TILE, c.page_size, ops.device_arch(),
                     ops.smem_limit(), stages)


@functools.lru_cache(maxsize=None)
def _tile_for(dtype: str, d: int, rows: int, forced, page_size: int, arch: str,
              smem_limit: int, stages: int = 2):
    """_decode_tile's rule (or the forced tile) for these facts; None where the tile does not fit
    the device or the rows one copy reads do not lie in whole pages (page_size % plan.page_rows:
    a tile's block_n, a key-split warp's share of it; page_size 0: contiguous).
    Cached: checking a tile reads the kernel's shared-memory size (its source, hashed)."""
    from .gpu import plan
    from .tile import TileConfig, default_tile
    try:
        if forced is not None:
            tile = forced
        elif dtype in ("float16", "bfloat16"):
            if rows <= 16:
                # 4 warps that split each tile's keys, 16 each: 4 warps read small steps up to
                # 1.9x faster than one (NOTES v26, call 99); each warp stages its own 16 keys
                # from its own page, so pages of 16 and 32 keep the 64-key tile (NOTES v101)
                tile = TileConfig(16, 64, 4, stages, "mma")
            else:   # two warps of 16 rows, every key of a tile (32 at most at d = 256)
                keys = min(64, page_size) if page_size else 64
                keys = min(keys, DECODE_WIDE_KEYS) if d > DECODE_WIDE_D else keys
                tile = TileConfig(32, keys, 2, stages, "mma")
        else:
            # float32: the CUDA cores (attention_with_kvcache has no precision argument yet)
            tile = default_tile(d, dtype, smem_limit=smem_limit, arch=arch,
                                precision="ieee" if dtype == "float32" else None)
        plan.check_tile(tile, d, dtype, smem_limit=smem_limit, arch=arch)
    except ValueError:
        return None
    if page_size and page_size % plan.page_rows(tile):
        return None
    return tile


class _KernelPlan:
    """One call signature of attention_with_kvcache on CuPy, prepared for the one-launch path:
    the ops.ForwardLaunch of the KV-cache kernels, its parameter struct packed but for the
    arrays' addresses. The launch also appends k_new and v_new (the kernels read the new keys
    from them and write them into the cache: pipeline.cuh, write_appended). ``make`` returns
    None when the kernels cannot take the call (the reference path does). Calls with the same
    signature (_signature: shapes, strides, dtypes, device, alignment and options) reuse it: a
    decode step then costs one launch and little else on the host."""

    def __init__(self, c: _Call, launch, copy_seqlens: bool, copy_table: bool, copy_new: bool,
                 spans=None):
        self.call, self.launch = c, launch
        self.copy_seqlens, self.copy_table, self.copy_new = copy_seqlens, copy_table, copy_new
        # run(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, with_lse=True):
        # (out (B, Hq, Tq, d), lse (B, Hq, Tq) or None without with_lse), k_new and v_new (if
        # any) appended; the launch itself when the kernels read every array in place
        self.run = self._copy_and_launch if (copy_seqlens or copy_table or copy_new) else launch
        # an append's caches: each one's byte extent relative to its address (the same for every
        # array of the signature), so that the overlap check costs two comparisons per call
        self.spans = spans
        # v's address minus k's where extents meet and no element is shared (K and V interleaved
        # in one array): the exact test (~10 us) settles each offset once for the signature
        self.disjoint_gaps: set[int] = set()

    def check_writable(self, k_cache, v_cache) -> None:
        """_check_writable of an append (CuPy arrays of this signature), without their extents."""
        if self.spans is None:
            return
        (klo, khi), (vlo, vhi) = self.spans
        kp, vp = k_cache.data.ptr, v_cache.data.ptr
        if _spans_overlap((kp + klo, kp + khi), (vp + vlo, vp + vhi)) and \
                vp - kp not in self.disjoint_gaps:
            _check_writable(k_cache, v_cache, self.call.xp)   # raises, naming the arrays
            if len(self.disjoint_gaps) < 64:
                self.disjoint_gaps.add(vp - kp)

    @classmethod
    def make(cls, c: _Call, q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new):
        from types import SimpleNamespace
        from .gpu import ops, views
        if not (_IN_KERNEL and c.d % 8 == 0 and 16 <= c.d <= 256):
            return None
        if not all(views.kernel_ok(x) for x in (q, k_cache, v_cache)):
            return None
        G = c.group
        # the kernels see each sequence's keys whole, so a left window bound (which the
        # reference fold applies by slicing the keys) keeps one head per row
        fold = G > 1 and _foldable(c) and c.mask.left is None
        rows_per_head = G if fold else c.Tq
        tile = _decode_tile(c, q.dtype, rows_per_head)
        if tile is None:
            return None
        num_splits = c.options["num_splits"]
        auto = num_splits is None
        if auto:
            blocks = c.B * (c.Hkv if fold else c.Hq) * -(-rows_per_head // tile.block_m)
            num_splits, stages = _decode_split(blocks, -(-c.capacity // tile.block_n),
                                               ops.sm_count())
            if stages != tile.num_stages:
                tile = _decode_tile(c, q.dtype, rows_per_head, stages) or tile
        xp = c.xp
        copy_seqlens = cache_seqlens.strides[0] != 4
        copy_table = block_table is not None and block_table.shape[1] > 1 and \
            block_table.strides[1] != 4
        table = xp.ascontiguousarray(block_table) if copy_table else block_table
        copy_new, new_strides = False, None
        if c.Tnew:
            copy_new = not all(views.kernel_ok(x) for x in (k_new, v_new))
            if copy_new:   # rows the kernels cannot read in place: contiguous copies per call
                k_new, v_new = (xp.ascontiguousarray(x) for x in (k_new, v_new))
            new_strides = (views.strides(k_new), views.strides(v_new))
        rows = ops.CacheRows(None, table, c.page_size, seqused_add=c.Tnew,
                             num_pages=c.num_pages, new_strides=new_strides)
        opts = SimpleNamespace(scale=c.options["scale"], softcap=c.options["softcap"],
                               mask=Mask.make() if fold else c.mask, mask_mod=None,
                               alibi_slopes=None if c.slopes is None else c.slopes.reshape(-1))
        # folded: query head hk·G + g of the one query is row g of kv head hk's query tile
        qv = q.reshape(c.B, c.Hkv, G, c.d) if fold else q
        launch = ops.kvcache_launch(qv, k_cache, v_cache, opts, rows, tile=tile,
                                    group=1 if fold else G, num_splits=num_splits,
                                    auto_splits=auto, out_shape=(c.B, c.Hq, c.Tq, c.d),
                                    lse_shape=(c.B, c.Hq, c.Tq), max_cluster=DECODE_CLUSTER)
        spans = None
        if c.Tnew and k_cache.size and v_cache.size:
            spans = tuple(_extent(x, relative=True) for x in (k_cache, v_cache))
        return cls(c, launch, copy_seqlens, copy_table, copy_new, spans)

    def _copy_and_launch(self, q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new,
                         with_lse=True):
        xp = self.call.xp
        if self.copy_seqlens:
            cache_seqlens = xp.ascontiguousarray(cache_seqlens)
        if self.copy_table:
            block_table = xp.ascontiguousarray(block_table)
        if self.copy_new:
            k_new, v_new = xp.ascontiguousarray(k_new), xp.ascontiguousarray(v_new)
        return self.launch(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new,
                           with_lse=with_lse)


#: Prepared calls by signature (at most _MAX_PLANS; the oldest go first), and the mark of a
#: signature the kernels do not take
_PLANS: dict = {}
_MAX_PLANS = 512
_NO_PLAN = object()


def _signature(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, causal, window,
               softcap, scale, return_lse, num_splits):
    """What a prepared call (_KernelPlan) depends on, hashable; None when the call has arrays
    that are not CuPy's. Options enter with their types, so that a value the checks refuse
    never meets the plan of an equal value they accept (1 and True); the current device
    enters too (the plan's kernel belongs to its context). (Every call of a decode loop
    computes this: it is written for speed, NOTES v26.)"""
    nd = _ND[0] or _cupy_ndarray()
    if type(q) is not nd or type(k_cache) is not nd or type(v_cache) is not nd or \
            type(cache_seqlens) is not nd:
        return None
    qd, kd, vd, sd = q.data, k_cache.data, v_cache.data, cache_seqlens.data
    align = (qd.ptr | kd.ptr | vd.ptr) & 15
    table = new = None
    if block_table is not None:
        if type(block_table) is not nd:
            return None
        table = (block_table.shape, block_table.strides, block_table.dtype,
                 block_table.data.device_id)
    if k_new is not None or v_new is not None:
        if type(k_new) is not nd or type(v_new) is not nd:
            return None
        kn, vn = k_new.data, v_new.data
        align |= (kn.ptr | vn.ptr) & 15
        new = (k_new.shape, k_new.strides, k_new.dtype, kn.device_id,
               v_new.shape, v_new.strides, v_new.dtype, vn.device_id)
    if type(window) is list:
        window = tuple(window)
    window_types = tuple(map(type, window)) if type(window) is tuple else ()
    return (q.shape, q.strides, q.dtype, qd.device_id,
            k_cache.shape, k_cache.strides, k_cache.dtype, kd.device_id,
            v_cache.shape, v_cache.strides, v_cache.dtype, vd.device_id,
            cache_seqlens.shape, cache_seqlens.strides, cache_seqlens.dtype, sd.device_id,
            table, new, align, _ND[1](), type(causal), causal, type(window), window, window_types,
            type(softcap), softcap, type(scale), scale, type(return_lse), return_lse,
            type(num_splits), num_splits, _IN_KERNEL, DECODE_TILE, DECODE_FILL,
            DECODE_MAX_SPLITS, DECODE_MIN_TILES, DECODE_CLUSTER)


@functools.lru_cache(maxsize=None)
def _cupy_ndarray():
    cp = _cupy_module()
    if cp is not None:
        _ND[:] = [cp.ndarray, cp.cuda.runtime.getDevice]
    return None if cp is None else cp.ndarray


#: [cupy.ndarray, cupy's current-device query] once _cupy_ndarray has run (None without CuPy)
_ND = [None, None]


@functools.lru_cache(maxsize=None)
def _cupy_module():
    try:
        import cupy
    except ImportError:
        return None
    return cupy


def _options(causal, window, softcap, alibi_slopes, scale, return_lse, num_splits) -> dict:
    return dict(causal=causal, window=window, softcap=softcap, alibi_slopes=alibi_slopes,
                scale=scale, return_lse=return_lse, num_splits=num_splits)


def _prepared(key, q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, options):
    """The _KernelPlan of a signature not met before, made after every structural check and
    kept (_NO_PLAN when the kernels do not take it)."""
    c = _check_call(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, **options)
    plan = None
    if c.B and c.Tq and c.Hq:
        plan = _KernelPlan.make(c, q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new)
    if len(_PLANS) >= _MAX_PLANS:
        _PLANS.pop(next(iter(_PLANS)))
    _PLANS[key] = plan = _NO_PLAN if plan is None else plan
    return plan


# -- attention over one length -------------------------------------------------------------------

def _foldable(c: _Call) -> bool:
    """Whether a GQA group's queries can share one query tile: one query per sequence (the same
    keys for every head of the group) and no per-head ALiBi slope."""
    return c.Tq == 1 and c.slopes is None


def _strategy(c: _Call) -> str:
    if _GQA_STRATEGY is not None:
        return _GQA_STRATEGY
    if _foldable(c):
        return "fold"
    return "broadcast" if c.xp is np else "loop"


def _attend_length(c: _Call, q, k, v, slopes, L: int):
    """out (n, Hq, Tq, d), lse (n, Hq, Tq) for queries q (n, Hq, Tq, d) over keys k, v
    (n, Hkv, L, d) of sequences of one length L; ``slopes`` (n, Hkv, G) or None.

    GQA (G = Hq / Hkv query heads per kv head), without copying K/V per query head except in
    "broadcast":

    * G == 1: one call of cuflash.attention.
    * "fold" (Tq == 1, no ALiBi): the G queries of a group become G rows of one query block
      over the same keys. The one query (position L - 1) sees exactly the keys
      mask.key_range(0, 1, 1, L) (a causal mask or window cuts nothing else when Tq == 1), so
      those keys are sliced out and attended without a mask: exact for every such row.
    * "broadcast" (the default on NumPy): K/V (n, Hkv, 1, L, d) broadcast against q
      (n, Hkv, G, Tq, d): one call, K/V copied per query head inside cuflash.attention.
    * "loop" (the default on CuPy): one call per g of the G query heads, each over the shared
      K/V (n, Hkv, L, d): G launches, no copy.
    """
    n, G, Tq, d = q.shape[0], c.group, c.Tq, c.d
    opts = dict(c.options, return_lse=True)
    if G == 1:
        return attention(q, k, v, alibi_slopes=None if slopes is None else slopes.reshape(n, -1),
                         **opts)
    qg = q.reshape(n, c.Hkv, G, Tq, d)
    how = _strategy(c)
    if how == "fold":
        if not _foldable(c):
            raise AssertionError("the fold strategy needs Tq == 1 and no ALiBi")
        lo, hi = c.mask.key_range(0, 1, 1, L)
        hi = max(lo, hi)
        out, lse = attention(qg[:, :, :, 0], k[:, :, lo:hi], v[:, :, lo:hi],
                             softcap=c.options["softcap"], scale=c.options["scale"],
                             num_splits=c.options["num_splits"], return_lse=True)
    elif how == "broadcast":
        out, lse = attention(qg, k[:, :, None], v[:, :, None], alibi_slopes=slopes, **opts)
    elif how == "loop":
        xp = c.xp
        out = xp.empty((n, c.Hkv, G, Tq, d), dtype=q.dtype)
        lse = xp.empty((n, c.Hkv, G, Tq), dtype=accum_dtype(q.dtype))
        for g in range(G):
            out[:, :, g], lse[:, :, g] = attention(
                qg[:, :, g], k, v, alibi_slopes=None if slopes is None else slopes[:, :, g],
                **opts)
    else:
        raise AssertionError(f"unknown GQA strategy {how!r}")
    return out.reshape(n, c.Hq, Tq, d), lse.reshape(n, c.Hq, Tq)


def attention_with_kvcache(q, k_cache, v_cache, *, cache_seqlens, block_table=None, k_new=None,
                           v_new=None, causal=True, window=None, softcap=None, alibi_slopes=None,
                           scale=None, return_lse=False, num_splits=None, validate=True):
    """Attention of a few new queries per sequence over a KV cache, after appending new keys and
    values to the cache in place (FlashAttention's ``flash_attn_with_kvcache``).

    Parameters
    ----------
    q : array (B, Hq, Tq, d)
        The queries: the last Tq positions of each sequence (Tq = 1 for a decode step, a few
        for speculative decoding). NumPy (the CPU twin) or CuPy (the CUDA kernels); float16,
        bfloat16, float32 or float64; d from 1 to 256 (cuflash.attention pads it for the kernels).
    k_cache, v_cache : arrays, q's dtype and device
        Contiguous: (B, Hkv, S_max, d). Paged (with ``block_table``): (num_pages, Hkv,
        page_size, d), page_size a power of two >= 16. Hq must be a multiple of Hkv: query head h
        reads kv head h // (Hq // Hkv) (GQA; Hkv = 1 is MQA, Hkv = Hq is MHA).
    cache_seqlens : int32 array (B,), q's device
        Tokens already in each sequence's cache (0 <= cache_seqlens[b] <= capacity). **Not
        modified**: after the call the cache holds cache_seqlens[b] + Tnew tokens of sequence
        b, and the caller advances cache_seqlens for the next step (as with flash-attn).
    block_table : int32 array (B, W), optional
        Paged layout: token t of sequence b lives in slot t % page_size of page
        block_table[b, t // page_size]. Only the first ceil((cache_seqlens[b] + Tnew) /
        page_size) entries of row b are read (the rest may hold anything, e.g. -1). Pages may be
        shared between sequences for reading (a common prefix), but a page that k_new is written
        into must belong to its sequence alone.
    k_new, v_new : arrays (B, Hkv, Tnew, d), optional (both or neither)
        Written into the cache IN PLACE at positions cache_seqlens[b] .. cache_seqlens[b] +
        Tnew - 1 of sequence b, before the attention (which then sees them).
    causal : bool
        Default True. Aligned to the bottom-right corner per sequence: with L = cache_seqlens[b]
        + Tnew keys, query i (0 <= i < Tq) sees key j iff j <= i + L - Tq. When L < Tq the
        first Tq - L queries see no key: out 0, lse -inf (also every query of an L = 0
        sequence, causal or not).
    window, softcap, alibi_slopes, scale
        As in :func:`cuflash.attention`, applied per sequence with S = L. alibi_slopes: float32
        or float64, shape broadcastable to (B, Hq) (e.g. (Hq,)), one slope per query head.
    return_lse : bool
        Also return the log-sum-exp of each row's scores.
    num_splits : int from 1 to 256 (checks.MAX_SPLITS), optional
        Split-KV (flash-decoding): the keys of each query tile spread over this many thread
        blocks, merged exactly through their log-sum-exp (:func:`cuflash.attention`'s
        num_splits); None (the default) chooses from the cache's capacity and the GPU's SM count.
    validate : bool
        Default True: read cache_seqlens and block_table on the host and check their values
        before anything is written (on CuPy a device-to-host copy, which waits for the GPU).
        False skips those reads where the kernels can run without them (CuPy, the one-launch
        path): no host sync, so a decode loop costs only its launches on the host and can be
        captured in a CUDA graph. The caller then answers for the values: the kernels clamp
        lengths to the capacity and pages to the pool, so a bad value gives wrong numbers but
        never an access outside the arrays. :class:`PagedKVCache` passes False (its own
        bookkeeping holds them right).

    Returns
    -------
    out : array (B, Hq, Tq, d), q's dtype.
    lse : array (B, Hq, Tq), float32 (float64 for float64 inputs); only with ``return_lse``.

    With validate=True every check runs before anything is written, so a call that raises
    leaves the cache as it was. Errors name the argument: cache_seqlens beyond the cache, k_new
    overflowing a sequence's pages or the cache, block_table entries outside the page pool (or a
    written page shared), page sizes, dtypes, devices, shapes, Hq not a multiple of Hkv (the
    checks of shapes, dtypes and options run with validate=False too, once per call signature:
    later calls with arrays of the same layout and the same options reuse the prepared launch).
    """
    if validate is not False and validate is not True:   # (the per-call path: two identity tests)
        checks.check_bool("validate", validate)
    key = None if alibi_slopes is not None else _signature(
        q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, causal, window, softcap,
        scale, return_lse, num_splits)
    try:
        plan = _PLANS.get(key) if key is not None else None
    except TypeError:            # an option that is not hashable: no prepared call
        key = plan = None
    if plan is None and key is not None:
        plan = _prepared(key, q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new,
                         _options(causal, window, softcap, alibi_slopes, scale, return_lse,
                                  num_splits))
    if plan is not None and plan is not _NO_PLAN:   # the prepared one-launch path
        c = plan.call
        if validate:
            _read_indices(c, cache_seqlens, block_table)
        if c.Tnew:
            plan.check_writable(k_cache, v_cache)
        out, lse = plan.run(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new,
                            with_lse=bool(return_lse))
        return (out, lse) if return_lse else out
    options = _options(causal, window, softcap, alibi_slopes, scale, return_lse, num_splits)
    c = _check_call(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, **options)
    xp = c.xp
    if xp is not np and c.B and c.Tq and c.Hq and key is None:   # ALiBi: one launch, unkept
        once = _KernelPlan.make(c, q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new)
        if once is not None:
            if validate:
                _read_indices(c, cache_seqlens, block_table)
            out, lse = once.run(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new)
            return (out, lse) if return_lse else out
    c = _read_indices(c, cache_seqlens, block_table)
    if c.Tnew:
        _append(c, k_cache, v_cache, k_new, v_new)
    out = xp.empty((c.B, c.Hq, c.Tq, c.d), dtype=q.dtype)
    lse = xp.empty((c.B, c.Hq, c.Tq), dtype=accum_dtype(q.dtype))
    if c.B and c.Tq and c.Hq:
        lengths = c.lengths
        for L in np.unique(lengths):
            idx = np.flatnonzero(lengths == L)
            sel = _runs(idx)
            if not isinstance(sel, slice):
                sel = xp.asarray(idx)
            k, v = (_gather(c, cache, sel, idx, int(L)) for cache in (k_cache, v_cache))
            slopes = None if c.slopes is None else c.slopes[sel]
            out[sel], lse[sel] = _attend_length(c, q[sel], k, v, slopes, int(L))
    return (out, lse) if return_lse else out


# -- a paged cache for research code -------------------------------------------------------------

class PagePoolExhausted(RuntimeError):
    """A :class:`PagedKVCache` has fewer free pages than a request needs."""


class PagedKVCache:
    """A pool of pages holding the keys and values of many sequences, for research code, on
    NumPy or CuPy arrays alike (the bookkeeping lives on the host; only the pages are arrays).

    ``k`` and ``v`` are (num_pages, heads, page_size, head_dim) arrays of ``dtype`` on ``xp``:
    the paged layout of :func:`attention_with_kvcache`. A sequence (any hashable id) owns a list
    of pages; token t of it sits in slot t % page_size of its page t // page_size.

        >>> import numpy as np
        >>> cache = PagedKVCache(num_pages=8, heads=2, page_size=16, head_dim=16, dtype="float32")
        >>> cache.allocate("a")
        []
        >>> cache.append("a", np.ones((2, 20, 16), np.float32), np.zeros((2, 20, 16), np.float32))
        >>> cache.length("a"), cache.pages("a"), cache.num_free_pages
        (20, [0, 1], 6)
        >>> k, v = cache.gather("a"); k.shape
        (2, 20, 16)

    A decode step over several sequences: ``cache.attend(seqs, q, k_new, v_new, ...)`` (reserve
    pages, then :func:`attention_with_kvcache` with ``block_table(seqs)`` and ``seqlens(seqs)``,
    then advance the lengths). Freed pages return to the pool with their old contents.
    """

    def __init__(self, num_pages, heads, page_size, head_dim, dtype, *, xp=np):
        for name, value, least in (("num_pages", num_pages, 0), ("heads", heads, 1),
                                   ("head_dim", head_dim, 1)):
            if not _is_int(value) or value < least:
                raise ValueError(f"{name}={value!r} must be an int >= {least}")
        checks.check_head_dim(int(head_dim), f"head_dim={head_dim!r}")
        if not _is_int(page_size) or not _page_size_ok(int(page_size)):
            raise ValueError(_page_size_error("page_size", page_size))
        if dtype is None:   # (np.dtype(None) is float64)
            raise TypeError(f"dtype must be one of {sorted(DTYPES)}, got None")
        dt = resolve_dtype(dtype)
        if dt not in DTYPES.values():
            raise TypeError(f"dtype={dtype_name(dt)} is not supported; supported: "
                            f"{sorted(DTYPES)}")
        if xp is not np and getattr(xp, "__name__", None) != "cupy":
            raise TypeError(f"xp must be the numpy or the cupy module, got {xp!r}")
        self.xp, self.dtype = xp, dt
        self.num_pages, self.heads = int(num_pages), int(heads)
        self.page_size, self.head_dim = int(page_size), int(head_dim)
        shape = (self.num_pages, self.heads, self.page_size, self.head_dim)
        self.k = xp.zeros(shape, dtype=dt)
        self.v = xp.zeros(shape, dtype=dt)
        self._free = list(range(self.num_pages - 1, -1, -1))   # pop() hands out the lowest first
        self._pages: dict = {}
        self._length: dict = {}

    # -- bookkeeping

    @property
    def num_free_pages(self) -> int:
        return len(self._free)

    @property
    def sequences(self) -> list:
        """The ids of the allocated sequences, in allocation order."""
        return list(self._pages)

    def _known(self, seq):
        if seq not in self._pages:
            raise KeyError(f"sequence {seq!r} is not allocated (allocated: "
                           f"{list(self._pages)[:8]}{'...' if len(self._pages) > 8 else ''})")

    def pages(self, seq) -> list:
        """The pages of ``seq``, in token order."""
        self._known(seq)
        return list(self._pages[seq])

    def length(self, seq) -> int:
        """Tokens held by ``seq``."""
        self._known(seq)
        return self._length[seq]

    def capacity(self, seq) -> int:
        """Tokens ``seq`` can hold in the pages it owns."""
        self._known(seq)
        return len(self._pages[seq]) * self.page_size

    def _take(self, n: int, why: str) -> list:
        if n > len(self._free):
            raise PagePoolExhausted(f"{why} needs {n} more pages of {self.page_size} tokens; "
                                    f"{len(self._free)} of {self.num_pages} are free")
        return [self._free.pop() for _ in range(n)]

    def allocate(self, seq, tokens=0) -> list:
        """Start sequence ``seq`` (empty) with pages for ``tokens`` tokens; returns its pages.
        PagePoolExhausted (and nothing allocated) when the pool is short."""
        if seq in self._pages:
            raise ValueError(f"sequence {seq!r} is already allocated")
        if not _is_int(tokens) or tokens < 0:
            raise ValueError(f"tokens={tokens!r} must be an int >= 0")
        pages = self._take(-(-int(tokens) // self.page_size), f"allocating sequence {seq!r}")
        self._pages[seq], self._length[seq] = pages, 0
        return list(pages)

    def reserve(self, seq, tokens) -> list:
        """Make room for ``tokens`` more tokens behind ``seq``'s last (taking pages from the
        pool); returns its pages. PagePoolExhausted (and nothing taken) when the pool is short."""
        self._known(seq)
        if not _is_int(tokens) or tokens < 0:
            raise ValueError(f"tokens={tokens!r} must be an int >= 0")
        need = -(-(self._length[seq] + int(tokens)) // self.page_size) - len(self._pages[seq])
        if need > 0:
            self._pages[seq].extend(self._take(need, f"{tokens} more tokens of {seq!r}"))
        return list(self._pages[seq])

    def advance(self, seq, tokens) -> None:
        """Record ``tokens`` more tokens of ``seq`` that were written into its pages (as
        attention_with_kvcache's k_new does; it leaves the lengths to the caller)."""
        self._known(seq)
        if not _is_int(tokens) or tokens < 0:
            raise ValueError(f"tokens={tokens!r} must be an int >= 0")
        if self._length[seq] + tokens > self.capacity(seq):
            raise ValueError(f"advancing {seq!r} by {tokens} tokens to "
                             f"{self._length[seq] + tokens} exceeds its capacity "
                             f"{self.capacity(seq)}; reserve pages first")
        self._length[seq] += int(tokens)

    def free(self, seq) -> list:
        """Drop ``seq`` and return its pages to the pool (their contents stay until reused)."""
        self._known(seq)
        pages = self._pages.pop(seq)
        del self._length[seq]
        self._free.extend(reversed(pages))
        return pages

    # -- data

    def _check_kv(self, name, a, n=None):
        """a must be a (heads, tokens, head_dim) array of the cache's dtype and device (with n
        tokens when n is given)."""
        array_module(**{name: a})
        if (self.xp is np) != isinstance(a, np.ndarray):
            raise TypeError(f"{name} is on a different device from the cache "
                            f"({'NumPy' if self.xp is np else 'CuPy'} arrays)")
        if a.dtype != self.dtype:
            raise TypeError(f"{name} must have the cache's dtype {dtype_name(self.dtype)}, got "
                            f"{dtype_name(a.dtype)}")
        if (a.ndim != 3 or a.shape[0] != self.heads or a.shape[2] != self.head_dim
                or (n is not None and a.shape[1] != n)):
            tokens = "tokens" if n is None else f"tokens={n}"
            raise ValueError(f"{name} must have shape (heads={self.heads}, {tokens}, "
                             f"head_dim={self.head_dim}), got {tuple(a.shape)}")

    def append(self, seq, k, v) -> None:
        """Write k, v (heads, n, head_dim) behind ``seq``'s tokens, taking pages as needed."""
        self._known(seq)
        self._check_kv("k", k)
        n = int(k.shape[1])
        self._check_kv("v", v, n)
        self.reserve(seq, n)
        if n:
            pos = self._length[seq] + np.arange(n)
            pages = np.asarray(self._pages[seq], dtype=np.int64)[pos // self.page_size]
            page, slot = self.xp.asarray(pages), self.xp.asarray(pos % self.page_size)
            self.k[page, :, slot] = self.xp.swapaxes(k, 0, 1)
            self.v[page, :, slot] = self.xp.swapaxes(v, 0, 1)
        self._length[seq] += n

    def gather(self, seq):
        """(k, v), each (heads, length, head_dim): copies of ``seq``'s tokens in order."""
        self._known(seq)
        L, P = self._length[seq], self.page_size
        n = -(-L // P)
        pages = self.xp.asarray(np.asarray(self._pages[seq][:n], dtype=np.int64))
        out = []
        for pool in (self.k, self.v):
            blocks = self.xp.swapaxes(pool[pages], 0, 1)                 # (heads, n, P, d)
            out.append(self.xp.ascontiguousarray(
                blocks.reshape(self.heads, n * P, self.head_dim)[:, :L]))
        return tuple(out)

    def seqlens(self, seqs):
        """int32 (len(seqs),) on the cache's device: the cache_seqlens of these sequences."""
        for s in seqs:
            self._known(s)
        return self.xp.asarray(np.array([self._length[s] for s in seqs], dtype=np.int32))

    def block_table(self, seqs, width=None):
        """int32 (len(seqs), width) on the cache's device: row i lists seqs[i]'s pages, then -1.
        ``width`` defaults to the most pages any of them owns (at least 1)."""
        for s in seqs:
            self._known(s)
        most = max([len(self._pages[s]) for s in seqs], default=0)
        width = max(most, 1) if width is None else width
        if not _is_int(width) or width < most:
            raise ValueError(f"width={width!r} must be an int >= {most} (the most pages one of "
                             f"these sequences owns)")
        table = np.full((len(seqs), int(width)), -1, dtype=np.int32)
        for i, s in enumerate(seqs):
            table[i, :len(self._pages[s])] = self._pages[s]
        return self.xp.asarray(table)

    def attend(self, seqs, q, k_new=None, v_new=None, **options):
        """One step for the sequences ``seqs`` (distinct): reserve pages for k_new's tokens, run
        :func:`attention_with_kvcache` (q (len(seqs), Hq, Tq, d); k_new, v_new (len(seqs), heads,
        Tnew, head_dim) written into the pages) and advance each length by Tnew. ``options``:
        those of attention_with_kvcache (causal, window, softcap, alibi_slopes, scale,
        return_lse, num_splits; validate is False, since the indices are this cache's own).
        Returns what it returns. On an error the pages reserved here go
        back to the pool and the lengths stay."""
        seqs = list(seqs)
        if len(set(seqs)) != len(seqs):
            raise ValueError(f"seqs must be distinct, got {seqs!r}")
        for s in seqs:
            self._known(s)
        if getattr(q, "ndim", 0) == 4 and int(q.shape[0]) != len(seqs):
            raise ValueError(f"q has {int(q.shape[0])} sequences (q.shape[0]) but seqs names "
                             f"{len(seqs)}: one row of q per sequence of seqs")
        tnew = int(k_new.shape[2]) if getattr(k_new, "ndim", 0) == 4 else 0
        owned = {s: len(self._pages[s]) for s in seqs}
        try:
            for s in seqs:
                self.reserve(s, tnew)
            # validate=False: the lengths and pages come from this cache's bookkeeping
            result = attention_with_kvcache(q, self.k, self.v, cache_seqlens=self.seqlens(seqs),
                                            block_table=self.block_table(seqs), k_new=k_new,
                                            v_new=v_new, validate=False, **options)
        except BaseException:
            for s in seqs:
                extra = self._pages[s][owned[s]:]
                del self._pages[s][owned[s]:]
                self._free.extend(reversed(extra))
            raise
        for s in seqs:
            self._length[s] += tnew
        return result


# -- byte arithmetic (for plots of cache size, fragmentation and decode traffic) ---------------

def _itemsize(dtype) -> int:
    """Bytes of an element of one of the library's dtypes (None, int8, ... are errors: np.dtype
    would read None as float64)."""
    dt = None if dtype is None else resolve_dtype(dtype)
    if dt is None or dtype_name(dt) not in DTYPES:
        raise ValueError(f"dtype={dtype!r} must be one of {', '.join(DTYPES)}")
    return dt.itemsize


def _lengths(lengths) -> np.ndarray:
    """Token counts as int64, each a whole number >= 0 (2.7 was cut to 2)."""
    a = np.asarray(lengths).reshape(-1)
    whole = a.dtype.kind in "iu" or (a.dtype.kind == "f" and bool(np.all(np.isfinite(a)))
                                      and bool(np.all(a == np.round(a))))
    if not whole:
        raise ValueError(f"lengths must be whole numbers of tokens, got {lengths!r}")
    a = a.astype(np.int64)
    if a.size and a.min() < 0:
        raise ValueError(f"lengths must be >= 0, got {a.min()}")
    return a


def _nonneg_int(name, value) -> int:
    if not _is_int(value) or value < 0:
        raise ValueError(f"{name}={value!r} must be an int >= 0")
    return int(value)


def kv_cache_bytes(context, *, kv_heads, head_dim, dtype="float16", layers=1, batch=1) -> int:
    """Bytes of the keys and values of ``batch`` sequences of ``context`` tokens:
    2 · layers · batch · kv_heads · context · head_dim · itemsize.

    For a model with H query heads: MHA has kv_heads = H, GQA with groups of G heads H / G,
    MQA 1; the cache shrinks by the group size."""
    vals = [_nonneg_int(n, v) for n, v in (("context", context), ("kv_heads", kv_heads),
                                           ("head_dim", head_dim), ("layers", layers),
                                           ("batch", batch))]
    context, kv_heads, head_dim, layers, batch = vals
    return 2 * layers * batch * kv_heads * context * head_dim * _itemsize(dtype)


@dataclasses.dataclass(frozen=True)
class CacheWaste:
    """Token slots of a batch of sequences in a contiguous and in a paged cache.

    tokens: the sum of the lengths (slots in use). contiguous_slots: batch · max_len (every
    sequence reserves max_len). paged_slots: the sum of ceil(length / page_size) · page_size
    (pages), i.e. pages · page_size. The waste fractions are 1 - tokens / slots (0 when there
    are no slots)."""

    tokens: int
    contiguous_slots: int
    pages: int
    paged_slots: int

    @property
    def contiguous_waste(self) -> float:
        return 1 - self.tokens / self.contiguous_slots if self.contiguous_slots else 0.0

    @property
    def paged_waste(self) -> float:
        return 1 - self.tokens / self.paged_slots if self.paged_slots else 0.0


def cache_waste(lengths, *, page_size, max_len=None) -> CacheWaste:
    """Slots used and reserved for sequences of ``lengths`` tokens: contiguous (each sequence
    reserves ``max_len`` slots, default the longest length) against paged (each reserves its
    pages of ``page_size``; less than one page wasted per sequence)."""
    lens = _lengths(lengths)
    if not _is_int(page_size) or page_size < 1:
        raise ValueError(f"page_size={page_size!r} must be an int >= 1")
    longest = int(lens.max(initial=0))
    max_len = longest if max_len is None else _nonneg_int("max_len", max_len)
    if max_len < longest:
        raise ValueError(f"max_len={max_len} is shorter than the longest length {longest}")
    pages = int((-(-lens // page_size)).sum())
    return CacheWaste(int(lens.sum()), int(lens.size) * max_len, pages, pages * page_size)


def decode_step_bytes(lengths, *, q_heads, kv_heads, head_dim, dtype="float16", tq=1, tnew=None,
                      page_size=None, gqa_aware=True) -> int:
    """Device-memory bytes one attention_with_kvcache step must move, at least, for sequences
    that hold ``lengths`` tokens after the append: the read ceiling of a decode kernel is
    this / peak bandwidth.

    Reads: K and V of every sequence (sum(lengths) · kv_heads · head_dim each; with
    ``gqa_aware=False`` once per query head instead: q_heads in place of kv_heads), q
    (B · q_heads · tq · head_dim), k_new and v_new (tnew tokens, default tq; read once and
    written once into the cache), cache_seqlens (4 bytes per sequence) and, paged, the
    block_table entries in use (4 bytes per page). Writes: out (like q), lse (4 bytes per row;
    8 for float64) and the appended K/V. Inputs of ``dtype``."""
    lens = _lengths(lengths)
    q_heads, kv_heads, head_dim, tq = (_nonneg_int(n, v) for n, v in (
        ("q_heads", q_heads), ("kv_heads", kv_heads), ("head_dim", head_dim), ("tq", tq)))
    tnew = tq if tnew is None else _nonneg_int("tnew", tnew)
    if kv_heads < 1 or q_heads % kv_heads:
        raise ValueError(f"q_heads={q_heads} must be a multiple of kv_heads={kv_heads} >= 1")
    if page_size is not None and (not _is_int(page_size) or page_size < 1):
        raise ValueError(f"page_size={page_size!r} must be an int >= 1 or None (contiguous)")
    e = _itemsize(dtype)
    gqa_aware = checks.check_bool("gqa_aware", gqa_aware)
    B, tokens = int(lens.size), int(lens.sum())
    heads_read = kv_heads if gqa_aware else q_heads
    kv = 2 * tokens * heads_read * head_dim * e
    q_out = 2 * B * q_heads * tq * head_dim * e
    lse = B * q_heads * tq * accum_dtype(resolve_dtype(dtype)).itemsize
    new = 2 * 2 * B * kv_heads * tnew * head_dim * e
    index = 4 * B + (0 if page_size is None else 4 * int((-(-lens // page_size)).sum()))
    return kv + q_out + lse + new + index


__all__ = ["attention_with_kvcache", "PagedKVCache", "PagePoolExhausted", "kv_cache_bytes",
           "cache_waste", "CacheWaste", "decode_step_bytes", "MIN_PAGE_SIZE"]
