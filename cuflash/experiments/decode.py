"""KV-cache decode steps in experiments (issue 14): what the axes ``cache``, ``page_size`` and
``cache_lengths`` and the method ``read_ceiling`` mean, and what is made, called, measured and
counted at such a point, in one place.

A sweep with ``cache: [contiguous, paged]`` is a KV-cache sweep. Each of its points is one step of
``cuflash.attention_with_kvcache``:

* ``batch`` B sequences; ``heads`` Hq query heads and Hkv = Hq / G kv heads (the ``group`` axis
  of ``layouts``: G = 1 MHA, 1 < G < Hq GQA, 'heads' MQA); ``head_dim`` d; ``dtype``;
* ``kv_len`` S, the context: the tokens sequence b holds after the step, L_b = S, or with a
  ``cache_lengths`` mix ``{fractions: [1, 0.5, 0.01x4]}`` L_b = ceil(f_b · S), the fractions in
  turn over the batch ('FxN': N sequences of fraction F). The first fraction is 1, so S is the
  longest sequence (the contiguous cache's S_max);
* ``seq_len`` T = Tq, the queries per sequence (1: decoding; a few: speculative decoding). The
  step appends Tq tokens (``k_new``, ``v_new``) at ``cache_seqlens`` = L_b - Tq and the Tq
  queries attend over the L_b tokens (causal aligned to the bottom right). Only the forward.

The cache (:func:`make_inputs`), both with random tokens:

* ``contiguous``: k_cache, v_cache (B, Hkv, S, d): every sequence reserves the longest's slots;
* ``paged``: a :class:`cuflash.PagedKVCache` of pages of ``page_size`` tokens (a power of two
  >= 16; default :data:`DEFAULT_PAGE_SIZE`), holding exactly the pages the sequences take: the
  pool is as large as a ledger PagedKVCache handed out (:func:`pages_needed`), then each sequence
  is allocated, its L_b - Tq tokens appended and room for Tq more reserved; ``block_table`` and
  ``cache_seqlens`` come from the pool.

Measured at every point, from those arrays (:class:`Allocation`, columns :data:`MEASURED_COLUMNS`):
``cache_bytes`` = k_cache.nbytes + v_cache.nbytes; ``cache_tokens``, the tokens they hold after
the step (sum(cache_seqlens) + B·Tq); ``cache_slots``, the token slots they reserve (B·S_max, or
pages in use · page_size); ``cache_pages``, the pool's pages in use (its pages less its free
ones); ``cache_waste`` = 1 - tokens / slots. Counted beside them (:func:`held_bytes`):
``kv_bytes`` = ``kvcache.kv_cache_bytes`` of the tokens (what any layout must hold), ``qkv_bytes``
adds q, and :data:`PREDICTED_COLUMNS`: ``pred_cache_bytes`` and ``pred_cache_waste`` from
``kvcache.cache_waste``'s slots for the layout.

Methods at a KV-cache point (:func:`build_call`):

* ``flash`` (on the CPU: the twin) and ``twin``: ``attention_with_kvcache(q, k_cache, v_cache,
  cache_seqlens=, block_table=, k_new=, v_new=, causal=)``; it picks its own tiles (no grid);
* ``naive``: the same step written plainly (:func:`naive_step`): k_new, v_new stored at
  cache_seqlens, each sequence's K/V gathered (contiguous: a view; paged: a copy of its pages)
  and ``cuflash.naive_attention`` over them, sequences of one length together, the Tq × L score
  rows materialised. Same cache, same result;
* ``read_ceiling``: no attention: a read-only pass (``readbw``) over an array of the K+V bytes
  of the step's tokens, timed like the others: the read bandwidth of the same device in the
  same run.

``pred_bytes`` of a step is ``kvcache.decode_step_bytes`` (the least a step moves: K and V once
per kv head, q, out, lse, the appended tokens, the index arrays), the same for flash and naive,
so ``gbps`` = pred_bytes / time is the K+V bytes read per second, comparable between methods
and with read_ceiling's (its array's bytes / time). FLOPs: 4·Hq·d per visible (query, key)
pair. ``error_rel``: out against the float64 oracle over each sequence's tokens (the cache's
first L_b - Tq, then k_new); none for read_ceiling.
"""
from __future__ import annotations

import dataclasses
import math
import re
from fractions import Fraction

import numpy as np

from .. import iomodel, kvcache
from .._xp import cupy_module, resolve_dtype
from ..mask import Mask
from . import layouts
from .unavailable import Unavailable, point_module

#: Values of the ``cache`` axis.
CACHES = ("contiguous", "paged")
#: Axis columns of the results.
AXIS_COLUMNS = ("cache", "page_size", "cache_lengths")
#: Measured from the arrays a point allocates (blank for read_ceiling rows).
MEASURED_COLUMNS = ("cache_bytes", "cache_tokens", "cache_slots", "cache_pages", "cache_waste")
#: Counted by ``kvcache.cache_waste`` for the point's layout (every row of a KV-cache point).
PREDICTED_COLUMNS = ("pred_cache_bytes", "pred_cache_waste")
#: Pages of a paged cache hold this many tokens unless ``page_size`` says otherwise.
DEFAULT_PAGE_SIZE = 256
#: The method that reads an array instead of attending.
CEILING = "read_ceiling"


# -- cache_lengths mixes --------------------------------------------------------------------------

_ITEM = re.compile(r"([0-9]+(?:\.[0-9]+)?(?:/[0-9]+)?)(?:x([0-9]+))?")


def _fraction(item, i: int) -> tuple[Fraction, int]:
    """(fraction, count) of one item: a number, 'p/q', or 'FxN'."""
    if isinstance(item, bool) or not isinstance(item, (int, float, str)):
        raise ValueError(f"item {i}: {item!r} is not a fraction: give a number in (0, 1], "
                         f"'p/q', or 'FxN' for N sequences of fraction F (e.g. 0.1x4)")
    text = repr(item) if isinstance(item, float) else str(item).strip()
    m = _ITEM.fullmatch(text)
    if not m:
        raise ValueError(f"item {i}: {item!r} is not a fraction: give a number in (0, 1], "
                         f"'p/q', or 'FxN' for N sequences of fraction F (e.g. 0.1x4)")
    try:
        f = Fraction(m.group(1))
    except ZeroDivisionError:
        raise ValueError(f"item {i}: {item!r} divides by zero") from None
    count = int(m.group(2) or 1)
    if not 0 < f <= 1:
        raise ValueError(f"item {i}: {item!r}: a fraction of kv_len must be in (0, 1]")
    if count < 1:
        raise ValueError(f"item {i}: {item!r}: the count N of 'FxN' must be >= 1")
    return f, count


def expand(items) -> tuple[Fraction, ...]:
    """Fractions from a mix's items (ValueError naming the bad item); the first must be 1."""
    out: list[Fraction] = []
    for i, item in enumerate(items):
        f, n = _fraction(item, i)
        layouts.check_count(len(out) + n, i, item)
        out += [f] * n
    if not out:
        raise ValueError("the mix is empty; give at least one fraction")
    if out[0] != 1:
        raise ValueError(f"the first fraction is {fraction_text(out[0])}; it must be 1, so that "
                         f"sequence 0 holds kv_len tokens (kv_len is the longest sequence, the "
                         f"contiguous cache's S_max)")
    return tuple(out)


def fraction_text(f: Fraction) -> str:
    """'1', '0.5', '0.001', or '1/3' when no short decimal is exact."""
    for digits in range(0, 7):
        if (f * 10 ** digits).denominator == 1:
            return str(int(f)) if digits == 0 else f"{float(f):.{digits}f}"
    return f"{f.numerator}/{f.denominator}"


def mix_text(fractions) -> str:
    """The CSV cell and key of a mix: '1,0.5,0.01x4' (runs written 'FxN')."""
    parts, i = [], 0
    while i < len(fractions):
        j = i
        while j < len(fractions) and fractions[j] == fractions[i]:
            j += 1
        text = fraction_text(fractions[i])
        parts.append(text if j - i == 1 else f"{text}x{j - i}")
        i = j
    return ",".join(parts)


def parse_mix(text) -> tuple[Fraction, ...] | None:
    """The fractions of a mix's text (:func:`mix_text`); None for none."""
    if text is None or text == "":
        return None
    return expand(str(text).split(","))


def sequence_lengths(S: int, batch: int, mix: str | None) -> tuple[int, ...]:
    """Tokens of each of ``batch`` sequences after the step: S each, or ceil(f · S) for the
    mix's fractions in turn."""
    fr = parse_mix(mix)
    if fr is None:
        return (S,) * batch
    return tuple(math.ceil(fr[b % len(fr)] * S) for b in range(batch))


# -- a point --------------------------------------------------------------------------------------

def is_cache_point(point) -> bool:
    return getattr(point, "cache", None) is not None


def lengths(point) -> tuple[int, ...]:
    """L_b of the point's sequences (after the step)."""
    return sequence_lengths(point.kv_len, point.batch, point.cache_lengths)


def kv_heads(point) -> int:
    return point.heads // point.group


def page_size(point) -> int | None:
    """The pages' tokens of a paged point, None for a contiguous one."""
    return point.page_size if point.cache == "paged" else None


def applies(method_name: str, layout: str | None, cache: str | None) -> bool:
    """Whether a method has points at a point of ``cache`` (None: not a KV-cache point):
    read_ceiling only at KV-cache points; torch_sdpa and methods with a layout option
    (padded, materialized) only elsewhere."""
    if cache is None:
        return method_name != CEILING
    return method_name in ("flash", "twin", "naive", CEILING) and layout in (None, "packed")


def run_shape(point) -> tuple[int, int, int, int]:
    """(batch, Hq, Tq, S): the step's queries against its longest sequence."""
    return point.batch, point.heads, point.seq_len, point.kv_len


def run_scores(point) -> int:
    """Score entries a step materialises (naive, the oracle): Hq · Tq · sum(L_b)."""
    if point.method_name == CEILING:
        return 0
    return point.heads * point.seq_len * sum(lengths(point))


def has_oracle(point) -> bool:
    """Whether error_rel is measured (not for read_ceiling, which computes no attention)."""
    return point.method_name != CEILING


def _itemsize(point) -> int:
    from .hostmem import _itemsize
    return _itemsize(point.dtype)


def token_bytes(point) -> int:
    """Bytes of K and V of the step's tokens (``kvcache.kv_cache_bytes``): what any layout must
    hold, and the bytes read_ceiling reads."""
    return 2 * sum(lengths(point)) * kv_heads(point) * point.head_dim * _itemsize(point)


def held_bytes(point) -> dict:
    """kv_bytes (K and V of the tokens), qkv_bytes (and q), pred_cache_bytes and
    pred_cache_waste (``kvcache.cache_waste``: slots of the layout: B · S_max contiguous, whole
    pages paged)."""
    L, e = lengths(point), _itemsize(point)
    waste = kvcache.cache_waste(L, page_size=page_size(point) or 1)
    paged = point.cache == "paged"
    slots = waste.paged_slots if paged else waste.contiguous_slots
    per_slot = 2 * kv_heads(point) * point.head_dim * e
    kv = token_bytes(point)
    return {"kv_bytes": kv,
            "qkv_bytes": kv + point.batch * point.heads * point.seq_len * point.head_dim * e,
            "pred_cache_bytes": slots * per_slot,
            "pred_cache_waste": waste.paged_waste if paged else waste.contiguous_waste}


def step_traffic(point) -> iomodel.Traffic:
    """Bytes read and written by one step at least (``kvcache.decode_step_bytes``, split: the
    writes are out, lse and the appended K/V), and its FLOPs."""
    if point.method_name == CEILING:
        return iomodel.Traffic(token_bytes(point), 0, 0.0)
    L, Tq, d = lengths(point), point.seq_len, point.head_dim
    B, Hq, Hkv = point.batch, point.heads, kv_heads(point)
    total = kvcache.decode_step_bytes(L, q_heads=Hq, kv_heads=Hkv, head_dim=d, dtype=point.dtype,
                                      tq=Tq, page_size=page_size(point))
    e = _itemsize(point)
    acc = 8 if point.dtype == "float64" else 4                  # lse: float32 (float64 inputs: 8)
    written = B * Hq * Tq * d * e + B * Hq * Tq * acc + 2 * B * Hkv * Tq * d * e
    return iomodel.Traffic(total - written, written, flops(point))


def flops(point) -> float:
    """4 · Hq · d per visible (query, key) pair of each sequence (Tq queries over L_b keys,
    causal aligned to the bottom right)."""
    if point.method_name == CEILING:
        return 0.0
    mask = Mask.make(causal=bool(point.causal))
    return float(sum(iomodel.attention_flops(point.heads, point.seq_len, L, point.head_dim, mask)
                     for L in lengths(point)))


def model_notes(point) -> list[str]:
    """What pred_bytes of the point's row is, where it is not what the method moves."""
    if point.method_name == "naive":
        return ["pred_bytes: decode_step_bytes, the least a step moves (naive's score rows and "
                "gathered K/V are not counted)"]
    if point.method_name == CEILING:
        return ["pred_bytes: the bytes of the array read (K+V of the step's tokens)"]
    if point.device == "gpu" and (point.cache == "paged" or point.group > 1):
        return ["pred_bytes: decode_step_bytes, the least a step moves; the reference path "
                "moves more (paged: K/V gathered into a copy; GQA: K/V read per query head)"]
    return []


def describe(point) -> str:
    """' contiguous cache' or ' paged cache (pages of 256)', and ' lengths 1,0.5x3 of S'."""
    if not is_cache_point(point):
        return ""
    text = (f" paged cache (pages of {point.page_size})" if point.cache == "paged"
            else " contiguous cache")
    if point.cache_lengths is not None:
        text += f" lengths {point.cache_lengths} of S"
    return text


# -- the arrays -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Allocation:
    """What a point's cache arrays hold, read from them (see the module docstring)."""

    cache_bytes: int
    cache_tokens: int
    cache_slots: int
    cache_pages: int | None

    @property
    def cache_waste(self) -> float:
        return 1 - self.cache_tokens / self.cache_slots if self.cache_slots else 0.0

    def columns(self) -> dict:
        return {"cache_bytes": self.cache_bytes, "cache_tokens": self.cache_tokens,
                "cache_slots": self.cache_slots, "cache_pages": self.cache_pages,
                "cache_waste": self.cache_waste}


class StepInputs(dict):
    """The arrays of one step by name (q, k_new, v_new, k_cache, v_cache, cache_seqlens and,
    paged, block_table; read_ceiling: x), with ``allocation`` (None for read_ceiling) and the
    host copies ``seqlens`` (B,) and ``table`` (B, W) or None that the naive step reads."""

    allocation: Allocation | None = None
    seqlens: np.ndarray | None = None
    table: np.ndarray | None = None


class _Random:
    """Random normal arrays of one dtype on the point's device: made there, or on the host and
    copied (``on_host``: no kernel runs to make them, for ncu)."""

    def __init__(self, xp, seed: int, dtype, on_host: bool):
        self.xp, self.dtype = xp, dtype
        self.host = xp is np or on_host
        self.rng = (np.random.default_rng(seed) if self.host
                    else xp.random.default_rng(seed))

    def normal(self, shape):
        if self.host:
            a = self.rng.standard_normal(shape, dtype=np.float32).astype(self.dtype)
            return a if self.xp is np else self.xp.asarray(a)
        return self.rng.standard_normal(shape, dtype=self.xp.float32).astype(self.dtype)


def pages_needed(lengths_, page_size_: int) -> int:
    """Pages a PagedKVCache hands out for sequences of these lengths: a ledger pool (one
    element per slot, on the host) allocates each sequence and the pages it gave out are
    counted."""
    lengths_ = [int(n) for n in lengths_]
    if not lengths_:
        return 0
    most = len(lengths_) * -(-max(lengths_) // page_size_)
    ledger = kvcache.PagedKVCache(num_pages=most, heads=1, page_size=page_size_, head_dim=1,
                                  dtype="float32")
    for b, n in enumerate(lengths_):
        ledger.allocate(b, tokens=n)
    return ledger.num_pages - ledger.num_free_pages


def make_inputs(point, seed: int, on_host: bool = False) -> StepInputs:
    """The arrays of one step (see the module docstring), on the point's device."""
    xp = point_module(point)
    if point.method_name == CEILING:
        from .readbw import make_array
        if on_host and xp is not np:
            return StepInputs(x=xp.asarray(make_array(token_bytes(point), np, seed)))
        return StepInputs(x=make_array(token_bytes(point), xp, seed))
    dtype = resolve_dtype(point.dtype)
    B, Hq, Tq, d, Hkv = point.batch, point.heads, point.seq_len, point.head_dim, kv_heads(point)
    L = lengths(point)
    rnd = _Random(xp, seed, dtype, on_host)
    arrays = {"q": rnd.normal((B, Hq, Tq, d)), "k_new": rnd.normal((B, Hkv, Tq, d)),
              "v_new": rnd.normal((B, Hkv, Tq, d))}
    held = [n - Tq for n in L]                       # tokens in the cache before the step
    if point.cache == "contiguous":
        k_cache = xp.zeros((B, Hkv, max(L), d), dtype=dtype)
        v_cache = xp.zeros((B, Hkv, max(L), d), dtype=dtype)
        for b, n in enumerate(held):
            k_cache[b, :, :n] = rnd.normal((Hkv, n, d))
            v_cache[b, :, :n] = rnd.normal((Hkv, n, d))
        seqlens = np.asarray(held, dtype=np.int32)
        table = None
        alloc = Allocation(int(k_cache.nbytes + v_cache.nbytes), int(seqlens.sum()) + B * Tq,
                           int(k_cache.shape[0] * k_cache.shape[2]), None)
        arrays.update(k_cache=k_cache, v_cache=v_cache, cache_seqlens=xp.asarray(seqlens))
    elif point.cache == "paged":
        P = point.page_size
        pool = kvcache.PagedKVCache(num_pages=pages_needed(L, P), heads=Hkv, page_size=P,
                                    head_dim=d, dtype=dtype, xp=xp)
        seqs = list(range(B))
        for b, n in enumerate(held):
            pool.allocate(b)
            pool.append(b, rnd.normal((Hkv, n, d)), rnd.normal((Hkv, n, d)))
            pool.reserve(b, Tq)                      # the step appends Tq tokens
        in_use = pool.num_pages - pool.num_free_pages
        seqlens = np.asarray([pool.length(s) for s in seqs], dtype=np.int32)
        table_dev = pool.block_table(seqs)
        table = np.asarray(table_dev.get() if xp is not np else table_dev)
        alloc = Allocation(int(pool.k.nbytes + pool.v.nbytes), int(seqlens.sum()) + B * Tq,
                           in_use * pool.page_size, in_use)
        arrays.update(k_cache=pool.k, v_cache=pool.v, cache_seqlens=pool.seqlens(seqs),
                      block_table=table_dev)
    else:
        raise ValueError(f"cache={point.cache!r} must be one of {list(CACHES)}")
    inputs = StepInputs(arrays)
    inputs.allocation, inputs.seqlens, inputs.table = alloc, seqlens, table
    return inputs


def allocation_columns(point, inputs) -> dict:
    """The measured cache columns of a point (none for read_ceiling)."""
    alloc = getattr(inputs, "allocation", None)
    return {} if alloc is None else alloc.columns()


# -- the calls ------------------------------------------------------------------------------------

def _positions(seqlens: np.ndarray, Tq: int, table, page_size_: int | None):
    """(first, second) index arrays (B, Tq) of the slots the step's new tokens go to:
    (sequence, token) contiguous, (page, slot) paged."""
    pos = seqlens.astype(np.int64)[:, None] + np.arange(Tq)[None, :]
    if table is None:
        return np.broadcast_to(np.arange(len(seqlens))[:, None], pos.shape), pos
    rows = np.arange(len(seqlens))[:, None]
    return table[rows, pos // page_size_], pos % page_size_


def _gather(cache, sel: np.ndarray, n: int, table, page_size_, xp):
    """(len(sel), Hkv, n, d): the first n tokens of sequences ``sel`` (contiguous: a view when
    they are consecutive; paged: a copy of their pages)."""
    if table is None:
        if sel.size and np.array_equal(sel, np.arange(sel[0], sel[0] + sel.size)):
            return cache[int(sel[0]):int(sel[0]) + sel.size, :, :n]
        return cache[xp.asarray(sel), :, :n]
    w = -(-n // page_size_)
    pages = cache[xp.asarray(table[sel, :w])]                   # (m, w, Hkv, P, d)
    m, _, h, P, d = pages.shape
    return xp.swapaxes(pages, 1, 2).reshape(m, h, w * P, d)[:, :, :n]


def naive_step(q, k_cache, v_cache, k_new, v_new, seqlens, table=None, *, causal=True):
    """One decode step written plainly, the naive baseline of ``attention_with_kvcache``:
    store k_new, v_new (B, Hkv, Tq, d) in the cache at ``seqlens`` (host ints (B,)), gather each
    sequence's K/V (contiguous: k_cache (B, Hkv, S_max, d) sliced; paged: k_cache (pages, Hkv,
    page_size, d) and ``table`` (B, W) host ints, its pages copied) and run
    ``cuflash.naive_attention`` on q (B, Hq, Tq, d), sequences of one length together.
    Returns out (B, Hq, Tq, d)."""
    from ..naive import naive_attention
    xp = np if isinstance(q, np.ndarray) else cupy_module()
    B, Hq, Tq, d = q.shape
    P = None if table is None else int(k_cache.shape[2])
    first, second = _positions(seqlens, Tq, table, P)
    ix = (xp.asarray(np.ascontiguousarray(first)), slice(None),
          xp.asarray(np.ascontiguousarray(second)))
    k_cache[ix] = xp.swapaxes(k_new, 1, 2)                       # (B, Tq, Hkv, d)
    v_cache[ix] = xp.swapaxes(v_new, 1, 2)
    out = xp.empty((B, Hq, Tq, d), dtype=q.dtype)
    total = seqlens.astype(np.int64) + Tq
    for n in np.unique(total):
        sel = np.flatnonzero(total == n)
        k = _gather(k_cache, sel, int(n), table, P, xp)
        v = _gather(v_cache, sel, int(n), table, P, xp)
        # float32 as attention_with_kvcache computes it: products on the CUDA cores ('ieee')
        prec = "ieee" if q.dtype == np.float32 else None
        out[xp.asarray(sel)] = naive_attention(q[xp.asarray(sel)], k, v, causal=causal,
                                               precision=prec)
    return out


def build_call(point, inputs):
    """The measured call of a KV-cache point (``measure.Call``)."""
    from .measure import Call, _to_numpy
    kind = "cupy" if point.device == "gpu" else "cpu"
    if point.method_name == CEILING:
        x = inputs["x"]
        if kind == "cpu":
            from .readbw import host_xor
            return Call(lambda: host_xor(x), kind, lambda r: (np.asarray(r, dtype=np.uint64),))
        from .readbw import DeviceRead
        reader = DeviceRead(x)
        return Call(reader.launch, kind, lambda r: (np.asarray(reader.xor(r), np.uint64),))
    a = inputs
    causal = bool(point.causal)

    def as_numpy(result):
        return (_to_numpy(result),)

    if point.method_name == "naive":
        return Call(lambda: naive_step(a["q"], a["k_cache"], a["v_cache"], a["k_new"],
                                       a["v_new"], a.seqlens, a.table, causal=causal),
                    kind, as_numpy)
    if point.method_name in ("flash", "twin"):
        table = a.get("block_table")
        return Call(lambda: kvcache.attention_with_kvcache(
            a["q"], a["k_cache"], a["v_cache"], cache_seqlens=a["cache_seqlens"],
            block_table=table, k_new=a["k_new"], v_new=a["v_new"], causal=causal),
            kind, as_numpy)
    raise Unavailable(f"{point.method_name} has no KV-cache step")


def oracle_error(point, inputs, outputs) -> float:
    """rel_error of out against the float64 oracle over each sequence's tokens: the cache's
    first L_b - Tq (as made; the step's own writes are not read), then k_new, v_new."""
    from .. import oracle
    from .measure import _to_numpy
    if point.method_name == CEILING:
        raise ValueError("read_ceiling computes no attention: it has no oracle")
    host = {n: _to_numpy(inputs[n]) for n in ("q", "k_new", "v_new", "k_cache", "v_cache")}
    seqlens, table = inputs.seqlens, inputs.table
    P = None if table is None else int(host["k_cache"].shape[2])
    ref = np.empty(host["q"].shape, dtype=np.float64)
    for b, s in enumerate(seqlens.tolist()):
        sel = np.array([b])
        k = np.concatenate([_gather(host["k_cache"], sel, s, table, P, np)[0],
                            host["k_new"][b]], axis=1)
        v = np.concatenate([_gather(host["v_cache"], sel, s, table, P, np)[0],
                            host["v_new"][b]], axis=1)
        ref[b] = oracle.oracle_attention(host["q"][b], k, v, causal=bool(point.causal))[0]
    if len(outputs) != 1:
        raise RuntimeError(f"{point.method} returned {len(outputs)} arrays, expected 1 (out)")
    return oracle.rel_error(outputs[0], ref)


# -- host memory ----------------------------------------------------------------------------------

def needed_bytes(point, error: bool = True, error_limit: int = 2 ** 24) -> int:
    """Upper bound on the host bytes measuring a KV-cache point on the CPU allocates: the cache
    (its slots, as pred_cache_bytes counts them) and the step's small arrays, then the larger of
    the call's peak (gathered K/V, GQA's K/V per query head inside the twin, score rows, all in
    float32 or wider) and the float64 oracle's (each sequence's K/V and score rows in float64).
    ``tests/test_kv_cache_experiments.py`` holds it above tracemalloc's peaks."""
    from .hostmem import SLACK_BYTES
    if point.method_name == CEILING:
        return token_bytes(point) + SLACK_BYTES
    e = _itemsize(point)
    wide = max(e, 4)
    L = lengths(point)
    B, Hq, Tq, d, Hkv = point.batch, point.heads, point.seq_len, point.head_dim, kv_heads(point)
    inputs = held_bytes(point)["pred_cache_bytes"] + (B * Hq + 2 * B * Hkv) * Tq * d * e
    tokens = sum(L)
    call = 4 * tokens * (Hkv + Hq) * d * wide + 6 * Hq * Tq * tokens * wide \
        + 4 * B * Hq * Tq * d * wide
    peak = call
    if error and run_scores(point) <= error_limit:
        longest = max(L)
        oracle = 6 * longest * (Hkv + Hq) * d * 8 + 6 * Hq * Tq * longest * 8 \
            + 2 * B * Hq * Tq * d * 8 + 2 * tokens * Hkv * d * e
        peak = max(peak, oracle)
    return inputs + peak + SLACK_BYTES


__all__ = ["CACHES", "AXIS_COLUMNS", "MEASURED_COLUMNS", "PREDICTED_COLUMNS",
           "DEFAULT_PAGE_SIZE", "CEILING", "expand", "mix_text", "parse_mix",
           "sequence_lengths", "lengths", "applies", "held_bytes", "step_traffic", "flops",
           "pages_needed", "make_inputs", "naive_step", "build_call", "oracle_error",
           "needed_bytes", "Allocation", "StepInputs"]
