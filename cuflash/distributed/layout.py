"""Sequence slicing for context parallelism: which positions of one sequence each rank holds.

A sequence of ``seq_len`` positions (queries, keys and values alike: ring attention is
self-attention over one sequence) is cut into equal chunks and dealt to ``world_size`` ranks:

* ``"contiguous"``: N chunks; rank r holds chunk r, positions [r·n, (r+1)·n) with n = L / N.
  Simple, but causal attention is unbalanced: rank N-1 has N-1 key blocks wholly below its
  diagonal to compute, rank 0 none.
* ``"zigzag"``: 2N chunks of c = L / (2N); rank r holds chunk r then chunk 2N-1-r, in that order
  in its local rows. Every rank then holds one early and one late chunk, so with causal attention
  every rank has the same number of visible (query, key) pairs (Brandon et al., "Striped
  Attention"; the zigzag form of ring-flash-attn and Megatron's context parallelism).

A rank's local array along the sequence axis is the concatenation of its chunks in that order:
``shard`` makes it from a global array, ``unshard`` puts the N local arrays back. Nothing here
depends on the array module: NumPy and CuPy arrays both work (``xp`` of the input).
"""
from __future__ import annotations

import numbers

import numpy as np

LAYOUTS = ("contiguous", "zigzag")


def check_layout(layout) -> str:
    """The layout name, or ValueError naming the valid ones."""
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} must be one of {LAYOUTS}")
    return layout


def _int(name, value, lo=0) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}={value!r} must be an int")
    if value < lo:
        raise ValueError(f"{name}={value!r} must be >= {lo}")
    return int(value)


def chunks_per_rank(layout) -> int:
    """1 for contiguous, 2 for zigzag."""
    return 1 if check_layout(layout) == "contiguous" else 2


def check_divisible(seq_len, world_size, layout) -> int:
    """The chunk length: seq_len / (chunks per rank · world_size); ValueError naming seq_len,
    world_size and layout when it does not divide."""
    seq_len, world_size = _int("seq_len", seq_len), _int("world_size", world_size, 1)
    parts = chunks_per_rank(layout) * world_size
    if seq_len % parts:
        need = (f"2 · world_size = {parts} (two chunks per rank)" if layout == "zigzag"
                else f"world_size = {parts}")
        raise ValueError(f"seq_len={seq_len} is not divisible by {need} for layout={layout!r}: "
                         f"pad the sequence to a multiple of {parts}")
    return seq_len // parts


def chunk_ranges(seq_len, world_size, rank, layout="zigzag") -> list:
    """Global [start, stop) ranges of the positions ``rank`` holds, in the order of its local
    rows: ``[(r·n, (r+1)·n)]`` (contiguous) or ``[(r·c, (r+1)·c), ((2N-1-r)·c, (2N-r)·c)]``
    (zigzag), n = L / N, c = L / (2N)."""
    c = check_divisible(seq_len, world_size, layout)
    rank = _int("rank", rank)
    if rank >= world_size:
        raise ValueError(f"rank={rank} must be < world_size={world_size}")
    if layout == "contiguous":
        return [(rank * c, (rank + 1) * c)]
    last = 2 * world_size - 1 - rank
    return [(rank * c, (rank + 1) * c), (last * c, (last + 1) * c)]


def local_positions(seq_len, world_size, rank, layout="zigzag", xp=np):
    """(seq_len / world_size,) int64 array of xp: the global position of each local row of
    ``rank`` (e.g. for rotary embeddings or a mask_mod's captured ids)."""
    return xp.concatenate([xp.arange(a, b, dtype=np.int64)
                           for a, b in chunk_ranges(seq_len, world_size, rank, layout)])


def _axis(x, axis) -> int:
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise TypeError(f"axis={axis!r} must be an int")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis={axis} is out of range for an array of shape {tuple(x.shape)}")
    return int(axis) % x.ndim


def shard(x, world_size, rank, layout="zigzag", axis=-2):
    """The local part of a global array for ``rank``: x (..., L, ...) with the sequence on
    ``axis`` (default -2, as q, k, v (..., L, d)) -> (..., L / world_size, ...): its chunks
    (``chunk_ranges``) concatenated in order. A view for contiguous, a copy for zigzag."""
    ax = _axis(x, axis)
    ranges = chunk_ranges(x.shape[ax], world_size, rank, layout)
    parts = [x[(slice(None),) * ax + (slice(a, b),)] for a, b in ranges]
    if len(parts) == 1:
        return parts[0]
    xp = _module(x)
    return xp.concatenate(parts, axis=ax)


def unshard(parts, layout="zigzag", axis=-2):
    """The global array from the local parts of ranks 0..N-1 (a list of N arrays, each
    (..., L / N, ...) on ``axis``): the inverse of :func:`shard`."""
    parts = list(parts)
    if not parts:
        raise ValueError("unshard needs the local arrays of every rank, got an empty list")
    n = len(parts)
    ax = _axis(parts[0], axis)
    local = parts[0].shape[ax]
    for r, p in enumerate(parts):
        if tuple(p.shape) != tuple(parts[0].shape):
            raise ValueError(f"unshard: part {r} has shape {tuple(p.shape)}, part 0 "
                             f"{tuple(parts[0].shape)}; every rank's part has the same shape")
    seq_len = local * n
    c = check_divisible(seq_len, n, layout)
    pieces = {}
    for r, p in enumerate(parts):
        for m, (a, _) in enumerate(chunk_ranges(seq_len, n, r, layout)):
            pieces[a] = p[(slice(None),) * ax + (slice(m * c, (m + 1) * c),)]
    xp = _module(parts[0])
    return xp.concatenate([pieces[a] for a in sorted(pieces)], axis=ax)


def _module(x):
    from .._xp import is_cupy_array, cupy_module
    return cupy_module() if is_cupy_array(x) else np


__all__ = ["LAYOUTS", "check_layout", "chunks_per_rank", "check_divisible", "chunk_ranges",
           "local_positions", "shard", "unshard"]
