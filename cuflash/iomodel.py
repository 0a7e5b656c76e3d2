"""IO model: predicted device-memory bytes and FLOPs of naive and tiled attention.

FlashAttention (Dao et al. 2022), Theorem 2: standard attention moves Θ(N·d + N²) bytes, the
tiled algorithm Θ(N²·d²/M) for on-chip memory M. Here the constants are exact: the tiled
counts follow the loops of the kernels and the CPU twin (``cuflash.twin``), which counts the bytes
it moves and must agree with these functions to the byte. With block_m ≈ M/d query rows per
tile, K and V are read ⌈T/block_m⌉ times, which is the N²d²/M term.

The naive counts follow ``cuflash.naive`` pass by pass (each elementwise step reads and writes the
T×S matrix once); they count the T×S passes and the operand reads, and leave out vectors of
length T. For 16-bit inputs the matrix products that read or write a T×S matrix run through
float32 copies, as CuPy 14.2 does for batched 16-bit matmul (seen with Nsight Compute on the
H200: a conversion kernel around each float32 GEMM), which adds two reads and two writes of
the T×S matrix per such product.

The float32 tensor-core kernels (a ``tile.kernel`` of 'wgmma_tf32' or a float16-product family,
``tile.F16_SPLIT``) read some operands as staged rows that a pass before the launch writes
(gpu/tf32_stage.py, gpu/f16x3_stage.py): the forward's K and V, the backward's Q, dO, K and V.
For them the counts add that pass (each operand read once, its staged rows written once, padded to
whole tiles) and count the kernels' reads of those operands in staged rows of whole tiles
(:func:`staged_row_bytes`). The twin reads the operands as given, as the other kernels do.
'wgmma_f16s' (``tile.F16_SCALED``, 'tf32''s backward on the 16-bit pair) stages float16 copies
instead: its counts are the 16-bit backward's on the copies, float32 gradients, and the pass that
makes them (:func:`f16_scaled_staging`).

These counts are what the algorithm asks of device memory. What DRAM serves is less when the
L2 cache catches re-reads: :func:`flash_forward_dram` and :func:`flash_backward_dram` model the
streamed operands' re-reads hitting in L2 (measured against ``hbm_bytes`` in
experiments/io_bytes.yaml; see the README).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import device
from ._xp import accum_dtype, resolve_dtype
from .checks import kernel_head_dim
from .gpu.f16x3_stage import carries_lo, row_floats
from .gpu.plan import dq_tile, head_dim_pad
from .gpu.tf32_stage import padded_keys
from .tile import F16_SCALED, F16_SPLIT, TileConfig, section_of, section_rows
from .mask import Mask


@dataclasses.dataclass(frozen=True)
class Traffic:
    """Predicted device-memory traffic and arithmetic of one pass."""

    bytes_read: int
    bytes_written: int
    flops: float

    @property
    def bytes_total(self) -> int:
        return self.bytes_read + self.bytes_written

    def __add__(self, other: "Traffic") -> "Traffic":
        return Traffic(self.bytes_read + other.bytes_read,
                       self.bytes_written + other.bytes_written, self.flops + other.flops)


def as_mask(causal) -> Mask:
    """A Mask from a Mask or a bool (causal or not): every function here takes either."""
    return causal if isinstance(causal, Mask) else Mask.make(causal=bool(causal))


def visible_pairs(T: int, S: int, causal) -> int:
    """Number of (query, key) pairs whose score is used (``Mask.visible_pairs``)."""
    return as_mask(causal).visible_pairs(T, S)


def attention_flops(batch: int, T: int, S: int, d: int, causal: bool, backward: bool = False) -> float:
    """FLOPs by the usual convention: 4·B·d per visible score pair forward (two matrix
    products), 2.5× that backward (five). Causal with T = S is about half the non-causal count."""
    f = 4.0 * batch * d * visible_pairs(T, S, causal)
    return 2.5 * f if backward else f


def _kv_rows(T, S, causal, block_m, block_n, whole=False):
    """Key rows one batch entry's forward loads: Σ over query tiles of the K/V rows visited
    (``whole``: whole tiles of block_n rows, as the staged kernels load them)."""
    mask = as_mask(causal)
    rows = 0
    for i0 in range(0, T, block_m):
        tiles = mask.key_tiles(i0, min(T, i0 + block_m), T, S, block_n)
        rows += _tile_rows(tiles, block_n, S, whole)
    return rows


def _tile_rows(tiles: range, block: int, n: int, whole: bool) -> int:
    """Rows of consecutive tiles (starts `tiles`, `block` rows each) of an n-row operand: whole
    tiles, or Σ min(block, n - start), which only the last tile can cut (O(1), not a sum over
    the tiles: a sweep's long points would take minutes)."""
    if not len(tiles):
        return 0
    return len(tiles) * block if whole else min(n, tiles[-1] + block) - tiles[0]


def _q_rows(T, S, causal, block_m, block_n, whole=False):
    """Query rows one batch entry's backward main pass loads: Σ over key tiles of rows visited
    (``whole``: whole tiles of block_m rows)."""
    mask = as_mask(causal)
    return sum(_tile_rows(mask.query_tiles(j0, min(S, j0 + block_n), T, S, block_m), block_m, T,
                          whole) for j0 in range(0, S, block_n))


def staged_row_bytes(kernel: str, d: int) -> int | None:
    """Bytes of one staged row that a float32 tensor-core kernel reads in place of a row of d
    floats, or None for a kernel that reads its operands as given. 'wgmma_tf32': K's rows and
    Vᵀ's columns of TF32 values (gpu/tf32_stage.py), d rounded up to the kernels' head dims;
    the float16-product families: hi (and lo) halves of the padded head dim and the inverse
    (gpu/f16x3_stage.py ``row_floats``)."""
    D = kernel_head_dim(d)
    if kernel == "wgmma_tf32":
        return 4 * D
    if kernel in F16_SPLIT:
        return 4 * row_floats(head_dim_pad(D, kernel), carries_lo(kernel))
    return None


@dataclasses.dataclass(frozen=True)
class _Operands:
    """How a kernel reads a d-wide operand of itemsize e: as given (row_bytes None: d·e bytes a
    row, the rows it needs) or in staged rows of row_bytes (whole tiles)."""

    d: int
    e: int
    row_bytes: int | None

    @property
    def whole(self) -> bool:
        return self.row_bytes is not None

    def tiles(self, rows: int) -> int:
        """Bytes of `rows` rows read tile by tile (the row counts of _kv_rows, _q_rows with
        ``whole``)."""
        return rows * (self.d * self.e if self.row_bytes is None else self.row_bytes)

    def once(self, n: int, tile_rows: int) -> int:
        """Bytes of an n-row operand read once (staged: padded to whole tiles of tile_rows)."""
        return self.tiles(n if self.row_bytes is None else padded_keys(n, tile_rows))

    def staging(self, batch: int, operands) -> Traffic:
        """The staging pass of `operands`, (rows, rows a tile) pairs, one per operand: each read
        once as given and written as staged rows padded to whole tiles; none when the kernel
        reads them as given."""
        if not self.whole:
            return Traffic(0, 0, 0.0)
        return Traffic(batch * sum(n for n, _ in operands) * self.d * self.e,
                       batch * sum(padded_keys(n, t) for n, t in operands) * self.row_bytes, 0.0)


def flash_forward(batch, T, S, d, dtype, causal, tile: TileConfig, num_splits=1) -> Traffic:
    """Bytes of the tiled forward: Q once, K and V once per query tile, O and lse once. Split-KV
    (num_splits > 1): every split reads its query tile and writes its O and lse in the
    accumulation dtype, which the merge reads back (K and V rows are shared out, not repeated).
    A staged kernel (:func:`staged_row_bytes`): K and V staged once, then read in staged rows of
    whole tiles."""
    e = resolve_dtype(dtype).itemsize
    a = accum_dtype(resolve_dtype(dtype)).itemsize
    op = _Operands(d, e, staged_row_bytes(tile.kernel, d))
    kv = _kv_rows(T, S, causal, tile.block_m, tile.block_n, op.whole)
    read = batch * (num_splits * T * d * e + 2 * op.tiles(kv))
    written = batch * (T * d * e + T * a)
    if num_splits > 1:
        partials = batch * num_splits * T * (d + 1) * a
        read, written = read + partials, written + partials
    return Traffic(read, written, attention_flops(batch, T, S, d, causal)) + \
        op.staging(batch, [(S, tile.block_n)] * 2)


def flash_backward(batch, T, S, d, dtype, causal, tile: TileConfig, deterministic=True) -> Traffic:
    """Bytes of the tiled backward (preprocess, main pass, and the dQ pass or accumulator).
    A staged kernel (:func:`staged_row_bytes`, always with its dQ pass): Q, dO, K and V staged
    once after the preprocess (which reads dO as given), then read in staged rows of whole tiles;
    lse and D by rows as given. 'wgmma_f16s': :func:`_f16_scaled_backward`."""
    if tile.kernel == F16_SCALED:
        return _f16_scaled_backward(flash_backward, batch, T, S, d, causal, tile, deterministic)
    e = resolve_dtype(dtype).itemsize
    a = accum_dtype(resolve_dtype(dtype)).itemsize
    bm, bn = tile.block_m, tile.block_n
    op = _Operands(d, e, staged_row_bytes(tile.kernel, d))
    dq = _dq_tile(tile, d)
    pad_q, pad_k = math.lcm(bm, dq.block_m), math.lcm(bn, dq.block_n)
    # preprocess: D = rowsum(dO ∘ O): read dO and O, write D
    read = 2 * T * d * e
    written = T * a
    # main pass: K, V once; per key tile the Q, dO rows (and lse, D) it visits; dK, dV once
    q_rows = _q_rows(T, S, causal, bm, bn)
    read += 2 * op.once(S, pad_k) + 2 * op.tiles(_q_rows(T, S, causal, bm, bn, op.whole)) \
        + q_rows * 2 * a
    written += 2 * S * d * e
    if deterministic or op.whole:
        # dQ pass (its own tile): Q, dO, lse, D once; K and V per query tile visited; dQ once
        read += 2 * op.once(T, pad_q) + T * 2 * a \
            + 2 * op.tiles(_kv_rows(T, S, causal, dq.block_m, dq.block_n, op.whole))
        written += T * d * e
    else:
        # float accumulator: zeroed, read-modify-written per visit, read once and converted
        written += T * d * a + q_rows * d * a + T * d * e
        read += q_rows * d * a + T * d * a
    flops = attention_flops(batch, T, S, d, causal, backward=True)
    return Traffic(batch * read, batch * written, flops) + \
        op.staging(batch, [(T, pad_q)] * 2 + [(S, pad_k)] * 2)


def stages_operands(kernel: str) -> bool:
    """Whether a kernel family reads operands that a pass before its launch wrote: staged rows
    (:func:`staged_row_bytes`) or 'wgmma_f16s''s float16 copies (:func:`f16_scaled_staging`)."""
    return kernel in ("wgmma_tf32", F16_SCALED, *F16_SPLIT)


def f16_scaled_staging(batch, T, S, d) -> Traffic:
    """The pass before 'wgmma_f16s''s backward (gpu/f16_scaled.py ``cast``): max |x| of q, k, v
    and dout (each read once), then float16 copies of q, k, v, out and dout (each read once and
    written in halves)."""
    maxima, copies = 2 * T + 2 * S, 3 * T + 2 * S
    return Traffic(batch * (maxima + copies) * d * 4, batch * copies * d * 2, 0.0)


def _f16_scaled_backward(model, batch, T, S, d, causal, tile, deterministic, **kw) -> Traffic:
    """`model` (flash_backward or flash_backward_dram) of a 'wgmma_f16s' tile: the 16-bit pair
    of the same tile on the float16 copies, its dq, dk, dv written in float32 (2 bytes an
    element more), and the staging pass."""
    inner = model(batch, T, S, d, "float16", causal, tile.replace(kernel="wgmma"),
                  deterministic, **kw)
    return inner + Traffic(0, batch * (T + 2 * S) * d * 2, 0.0) + \
        f16_scaled_staging(batch, T, S, d)


def _dq_tile(tile: TileConfig, d: int) -> TileConfig:
    """The dQ kernel's tile beside the dK/dV kernel's (gpu/plan.py ``dq_tile``; the twin runs
    both passes on one tile, the tiles of its tests)."""
    return dq_tile(tile, kernel_head_dim(d))


#: Extra T×S passes (reads, writes) of one matrix product that reads or writes a T×S matrix, when
#: 16-bit products run through float32 copies: a float32 GEMM output (2 units instead of 1)
#: plus its conversion (read 2, write 1), or a conversion of the input (read 1, write 2) plus a
#: GEMM reading float32 (2 units instead of 1).
_F32_MATMUL_EXTRA = (2, 2)


def _f32_matmuls(dtype, matmul_f32):
    return resolve_dtype(dtype).itemsize < 4 if matmul_f32 is None else matmul_f32


def naive_forward(batch, T, S, d, dtype, causal, matmul_f32=None) -> Traffic:
    """Bytes of ``naive_attention``: operand reads plus the passes over the T×S matrix.
    ``matmul_f32`` (default: for 16-bit dtypes) adds the float32 copies of the two products."""
    e = resolve_dtype(dtype).itemsize
    ts = T * S * e
    # matmul writes S; scale r+w; max r; subtract r+w; exp r+w; sum r; divide r+w; matmul reads P
    reads, writes = 7, 5
    if _f32_matmuls(dtype, matmul_f32):
        reads, writes = reads + 2 * _F32_MATMUL_EXTRA[0], writes + 2 * _F32_MATMUL_EXTRA[1]
    mask = 0
    if not as_mask(causal).dense:
        reads, writes, mask = reads + 1, writes + 1, T * S   # where(mask, s, -inf) and the mask
    read = batch * ((T + S) * d * e + S * d * e + reads * ts + mask)
    written = batch * (writes * ts + T * d * e)
    return Traffic(read, written, attention_flops(batch, T, S, d, causal))


def naive_backward(batch, T, S, d, dtype, causal, matmul_f32=None) -> Traffic:
    """Bytes of ``naive_attention_backward`` (it recomputes P with the forward's passes)."""
    e = resolve_dtype(dtype).itemsize
    ts = T * S * e
    f32 = _f32_matmuls(dtype, matmul_f32)
    fwd = naive_forward(batch, T, S, d, dtype, causal, matmul_f32=False)
    if f32:   # only the Q·Kᵀ product of the forward's passes runs here
        fwd = fwd + Traffic(batch * _F32_MATMUL_EXTRA[0] * ts, batch * _F32_MATMUL_EXTRA[1] * ts, 0)
    fwd_out = T * d * e * batch                      # the forward's P·V product is not done
    # dV: r P; dP: w; D: r P, r dP, w P∘dP, r it; dP -= D: r+w; dP *= P: 2r+w; *= scale: r+w;
    # dQ: r dS; dK: r dS
    reads, writes = 1 + 3 + 1 + 2 + 1 + 1 + 1, 1 + 1 + 1 + 1 + 1
    if f32:   # four more products touch a T×S matrix: dV, dP, dQ, dK
        reads, writes = reads + 4 * _F32_MATMUL_EXTRA[0], writes + 4 * _F32_MATMUL_EXTRA[1]
    read = batch * (reads * ts + 3 * T * d * e + 2 * S * d * e)   # dout twice, q; v, k
    read += fwd.bytes_read - batch * (ts + S * d * e)             # minus the forward's P·V reads
    written = batch * (writes * ts + T * d * e + 2 * S * d * e)
    written += fwd.bytes_written - fwd_out
    return Traffic(read, written, attention_flops(batch, T, S, d, causal, backward=True))


#: Defaults of the L2-aware forward model: the assumed sm_90 device's L2 (device.py; the H200's,
#: GPU.md: 50 MB) and the thread blocks resident at once (its 132 SMs × 2 blocks, what the mma
#: forward's registers allow; one a multiprocessor for the warp-specialized tiles, whose
#: producer and consumers take the register file: ``resident_blocks_of``).
L2_BYTES = device.assumed("sm_90").l2_bytes
RESIDENT_BLOCKS = 2 * device.assumed("sm_90").sm_count


def resident_blocks_of(tile: TileConfig, backward: bool = False) -> int:
    """The L2 models' default blocks in flight for ``tile``: RESIDENT_BLOCKS, or one block a
    multiprocessor of the assumed device for a warp-specialized tile (the forward's
    ``warp_specialized``, the backward's ``warp_specialized_dkdv``)."""
    ws = tile.warp_specialized_dkdv if backward else tile.warp_specialized
    sms = device.assumed("sm_90").sm_count
    return sms * tile.blocks_per_sm(backward) if ws else RESIDENT_BLOCKS


def flash_forward_dram(batch, T, S, d, dtype, causal, tile: TileConfig, *, l2_bytes=L2_BYTES,
                       resident_blocks=None) -> Traffic:
    """DRAM bytes of the tiled forward when the K/V re-reads hit in L2.

    Blocks start in the kernels' order (_heads_in_flight), so ``resident_blocks`` blocks cover
    whole sections of heads, about ceil(resident / query tiles) heads when a section is one head.
    When those heads' K and V (2·S·d·e bytes each) fit in ``l2_bytes``, each head's K and V come
    from DRAM once and the re-reads of :func:`flash_forward` are L2 hits; otherwise every
    re-read is taken to reach DRAM (the plain model). Writes are the plain model's. A staged
    kernel (:func:`staged_row_bytes`): the staging pass, then the same rule over staged rows of
    whole tiles. ``resident_blocks`` None: :func:`resident_blocks_of` the tile.
    """
    if resident_blocks is None:
        resident_blocks = resident_blocks_of(tile)
    plain = flash_forward(batch, T, S, d, dtype, causal, tile)
    e = resolve_dtype(dtype).itemsize
    op = _Operands(d, e, staged_row_bytes(tile.kernel, d))
    l2_rows = _l2_rows(T, S, d, e, l2_bytes)
    if not _fits(batch, math.ceil(T / tile.block_m), 2 * op.once(S, tile.block_n), l2_bytes,
                 resident_blocks, l2_rows):
        return plain
    kv_rows = _kv_rows_once(T, S, causal, tile.block_m, tile.block_n, op.whole)
    staging = op.staging(batch, [(S, tile.block_n)] * 2)
    return Traffic(batch * (T * d * e + 2 * op.tiles(kv_rows)) + staging.bytes_read,
                   plain.bytes_written, plain.flops)


def _rows_once(n, ranges, tile=None) -> int:
    """Rows of an n-row operand that at least one of the row ranges touches: what DRAM serves
    once when the re-reads hit in L2 (``tile``: ranges of tile starts, counted in whole tiles of
    that many rows, as the staged kernels load them)."""
    seen = np.zeros(n if tile is None else padded_keys(n, tile), dtype=bool)
    for r in ranges:
        if len(r):
            seen[r.start:min(n, r.stop) if tile is None else r[-1] + tile] = True
    return int(seen.sum())


def _kv_rows_once(T, S, causal, block_m, block_n, whole=False):
    """K/V rows that at least one query tile visits (``whole``: in whole tiles)."""
    mask = as_mask(causal)
    return _rows_once(S, (mask.key_tiles(i0, min(T, i0 + block_m), T, S, block_n)
                          for i0 in range(0, T, block_m)), block_n if whole else None)


def _q_rows_once(T, S, causal, block_m, block_n, whole=False):
    """Query rows that at least one key tile visits (``whole``: in whole tiles)."""
    mask = as_mask(causal)
    return _rows_once(T, (mask.query_tiles(j0, min(S, j0 + block_n), T, S, block_m)
                          for j0 in range(0, S, block_n)), block_m if whole else None)


def _heads_in_flight(batch, tiles_per_head, resident_blocks, l2_rows):
    """Heads whose blocks are resident at once. Blocks start in the kernels' order (block.cuh,
    GridTile; tile.section_of): sections of heads one after the other, tile-major within one
    (every head's first tile, then every head's second, ...), so the resident blocks cover whole
    sections: as many as they reach into (one head per section when a head has a wave of
    tiles: ceil(resident / tiles) heads)."""
    section = section_of(batch, tiles_per_head, l2_rows, resident_blocks)
    sections = math.ceil(resident_blocks / max(1, section * tiles_per_head))
    return min(batch, section * sections)


def _l2_rows(T, S, d, e, l2_bytes):
    """The kernels' sched_rows (ops._common): tile.section_rows of the two d-wide operands of
    max(T, S) rows each head streams."""
    return section_rows(2 * max(T, S) * d * e, l2_bytes)


def _fits(batch, tiles_per_head, per_head_bytes, l2_bytes, resident_blocks, l2_rows):
    return (_heads_in_flight(batch, tiles_per_head, resident_blocks, l2_rows) * per_head_bytes
            <= l2_bytes)


def flash_backward_dram(batch, T, S, d, dtype, causal, tile: TileConfig, deterministic=True, *,
                        l2_bytes=L2_BYTES, resident_blocks=None) -> Traffic:
    """DRAM bytes of the tiled backward when the streamed operands' re-reads hit in L2.

    Kernel by kernel, as :func:`flash_backward` counts them, with an L2 that starts cold at
    each kernel (Nsight Compute flushes the caches before each kernel it profiles, its default
    ``--cache-control all``; in a real step some inputs may still be in L2 from the kernel before):

    - preprocess (D = rowsum(dO ∘ O)): O and dO once, as in the plain model.
    - dK/dV kernel: one K/V tile resident per block (read once), Q, dO, lse and D streamed once
      per key tile. ``resident_blocks`` blocks cover whole sections of heads (_heads_in_flight),
      about ceil(resident / key tiles) heads when a section is one head; when their streamed operand,
      T·(2·d·e + 2·a) bytes each (plus the T·d·a float32 dQ accumulator in atomic mode, which the
      atomics read-modify-write in L2), fits in ``l2_bytes``, each head's Q, dO, lse, D (and the
      accumulator) come from DRAM once: the rows that at least one key tile visits. Otherwise the
      kernel's reads are the plain model's (every re-read reaches DRAM).
    - dQ kernel (deterministic mode; on its own tile, gpu/plan.py ``dq_tile``): Q, dO, lse, D
      resident (once), K and V streamed per query tile; the same rule with query tiles for key
      tiles and 2·S·d·e bytes per head; when they fit, each head's K and V rows that some query
      tile visits come once.
    - a staged kernel (:func:`staged_row_bytes`): the staging pass as in :func:`flash_backward`,
      and the same rules over staged rows of whole tiles (their bytes in place of d·e a row).
    - atomic mode (no dQ kernel): cp.zeros writes the T·d·a accumulator; when it fits, the dK/dV
      kernel reads it from DRAM once and writes it back once (its atomics are L2 read-modify-
      writes), else once per key tile visiting each row as in the plain model; astype reads it
      once and writes dQ (T·d·e).

    Writes are the plain model's (each output once), except the atomic accumulator's write-backs
    as above. ncu counts fewer writes than this when dirty lines are still in L2 at kernel end.
    ``resident_blocks`` is the same for both kernels (None: :func:`resident_blocks_of` the
    tile, a default, not each kernel's measured occupancy). 'wgmma_f16s':
    :func:`_f16_scaled_backward`.
    """
    if tile.kernel == F16_SCALED:
        return _f16_scaled_backward(flash_backward_dram, batch, T, S, d, causal, tile,
                                    deterministic, l2_bytes=l2_bytes,
                                    resident_blocks=resident_blocks)
    if resident_blocks is None:
        resident_blocks = resident_blocks_of(tile, backward=True)
    plain = flash_backward(batch, T, S, d, dtype, causal, tile, deterministic)
    e = resolve_dtype(dtype).itemsize
    a = accum_dtype(resolve_dtype(dtype)).itemsize
    bm, bn = tile.block_m, tile.block_n
    op = _Operands(d, e, staged_row_bytes(tile.kernel, d))
    dq = _dq_tile(tile, d)
    pad_q, pad_k = math.lcm(bm, dq.block_m), math.lcm(bn, dq.block_n)
    l2_rows = _l2_rows(T, S, d, e, l2_bytes)
    # preprocess: dO and O once; D once
    read, written = 2 * T * d * e, T * a
    # dK/dV kernel: K, V resident (once); Q, dO, lse, D streamed; dK, dV once
    stream_head = 2 * op.once(T, pad_q) + T * 2 * a + (0 if deterministic else T * d * a)
    once = _fits(batch, math.ceil(S / bn), stream_head, l2_bytes, resident_blocks, l2_rows)
    rows = _q_rows_once if once else _q_rows
    q_rows = rows(T, S, causal, bm, bn)
    read += 2 * op.once(S, pad_k) + 2 * op.tiles(rows(T, S, causal, bm, bn, op.whole)) \
        + q_rows * 2 * a
    written += 2 * S * d * e
    if deterministic or op.whole:
        # dQ kernel (its own tile): Q, dO, lse, D resident (once); K, V streamed; dQ once
        once = _fits(batch, math.ceil(T / dq.block_m), 2 * op.once(S, pad_k), l2_bytes,
                     resident_blocks, l2_rows)
        rows = _kv_rows_once if once else _kv_rows
        read += 2 * op.once(T, pad_q) + T * 2 * a \
            + 2 * op.tiles(rows(T, S, causal, dq.block_m, dq.block_n, op.whole))
        written += T * d * e
    else:
        # zeroing writes the accumulator; the dK/dV kernel reads and writes back the rows its
        # key tiles visit (once each when it fits in L2); astype reads it and writes dQ
        written += T * d * a + q_rows * d * a + T * d * e
        read += q_rows * d * a + T * d * a
    staging = op.staging(batch, [(T, pad_q)] * 2 + [(S, pad_k)] * 2)
    return Traffic(batch * read, batch * written, plain.flops) + staging


def predict(method: str, pass_: str, batch, T, S, d, dtype, causal, tile=None,
            deterministic=True) -> Traffic:
    """Dispatch on method ('naive' or 'flash') and pass ('forward', 'backward' or 'both')."""
    if pass_ not in ("forward", "backward", "both"):
        raise ValueError(f"pass_={pass_!r} must be 'forward', 'backward' or 'both'")
    if method == "naive":
        fwd = naive_forward(batch, T, S, d, dtype, causal)
        bwd = naive_backward(batch, T, S, d, dtype, causal)
    elif method == "flash":
        if tile is None:
            raise ValueError("the flash IO model needs a TileConfig")
        fwd = flash_forward(batch, T, S, d, dtype, causal, tile)
        bwd = flash_backward(batch, T, S, d, dtype, causal, tile, deterministic)
    else:
        raise ValueError(f"method={method!r} must be 'naive' or 'flash'")
    return {"forward": fwd, "backward": bwd, "both": fwd + bwd}[pass_]
