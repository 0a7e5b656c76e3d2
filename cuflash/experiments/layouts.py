"""Memory layouts of one attention problem in experiments: what the axes ``group`` (GQA) and
``varlen`` (packed batches of mixed lengths) and the method option ``layout`` ('packed',
'padded', 'materialized') mean, in one place.

GQA (``group: [1, 2, 4, 8, heads]``): ``heads`` is the number of query heads Hq; k and v have
Hkv = Hq / G heads (G = 'heads': MQA, one kv head). Query head h reads kv head h // G, as
``cuflash.attention`` takes it (the head axis -3, or -2 of a packed batch). Two layouts:

* packed (the default): q (B, Hq, T, d), k and v (B, Hkv, S, d), read in place by every method
  (torch's SDPA with ``enable_gqa``);
* materialized (a method with ``layout: materialized``): the baseline that stores K/V once per
  query head. The measured forward repeats k and v G times along the head axis
  (``numpy.repeat``: the copies a model without GQA kernels makes every call) and runs the
  Hq-head problem; the measured backward starts from that forward's residuals (which hold the
  repeated K/V) and sums dK, dV over each group back to Hkv heads (what autograd of the repeat
  does). Points only where G > 1 (at G = 1 both layouts are the same call).

Varlen (``varlen: [{lengths: [512, 2048, 256]}, ...]``; a length ``LxN`` is N sequences of
L tokens): each of the ``batch`` rows of ``seq_len`` tokens holds sequences of the lengths in
turn, the last cut at seq_len (``variants.Documents.in_row``: the rule documents masks use), so
``seq_len`` is the batch's total tokens when batch = 1. Two layouts:

* packed (the default): ``cuflash.attention_varlen(q, k, v, cu_seqlens, cu_seqlens, ...)`` on
  q (batch·seq_len, Hq, d), k and v (batch·seq_len, Hkv, d), cu_seqlens int32 (sequences + 1,)
  (naive: ``naive_attention_varlen``; the oracle one sequence at a time);
* padded (``layout: padded``, as for documents masks): each sequence its own batch entry,
  padded to the longest, causal: (batch·n, Hq, max_len, d) through ``cuflash.attention``. The
  pads come after each sequence's tokens, so causal hides them from the real queries.

What each point counts (:func:`flops`, :func:`problems`, :func:`held_bytes`):

* FLOPs: only the visible score pairs of the real tokens (4·d FLOPs each forward, 2.5x that
  backward, over the Hq query heads), the same number for every layout of one problem, so
  TFLOP/s compares useful work and the time ratio is the saving.
* Predicted bytes: the IO model (``cuflash.iomodel``) of the attention problems the call runs
  (:func:`problems`: packed varlen one problem per sequence length, padded the padded batch),
  plus, for materialized, the repeat's and the group sum's own traffic (:func:`extra_traffic`).
* ``kv_bytes``: the bytes of K and V the layout holds (2·rows·heads·d·itemsize: Hkv heads in
  place, Hq materialized; rows B·S dense, batch·seq_len packed, batch·n·max_len padded);
  ``qkv_bytes``: those and q's.
"""
from __future__ import annotations

import re

import numpy as np

from .. import iomodel
from . import variants

#: Axis columns of the results: the group size G, the kv heads it leaves, the varlen mix.
LAYOUT_COLUMNS = ("group", "kv_heads", "varlen")
#: Of those, the ones that identify a point (kv_heads follows from heads and group).
LAYOUT_KEY_COLUMNS = ("group", "varlen")
#: Bytes the layout holds (filled for every row, like the predicted bytes).
HELD_COLUMNS = ("kv_bytes", "qkv_bytes")
#: Method layouts: the problem as it is, padded (documents or varlen), K/V repeated per query head.
LAYOUTS = variants.LAYOUTS + ("materialized",)
#: ``group: heads``: G = Hq, one kv head (MQA).
MQA = "heads"


# -- varlen mixes ---------------------------------------------------------------------------------

_ITEM = re.compile(r"([0-9]+)(?:x([0-9]+))?")
#: The most sequences one mix may hold (varlen lengths here, decode's cache_lengths fractions):
#: 'LxN' expands to N entries, and a count past this is a typo, not a batch
MAX_SEQUENCES = 1 << 20


def check_count(total: int, i: int, item) -> None:
    """ValueError naming item ``i`` once a mix holds more than ``MAX_SEQUENCES`` sequences."""
    if total > MAX_SEQUENCES:
        raise ValueError(f"item {i}: {item!r} makes {total} sequences; a mix holds at most "
                         f"{MAX_SEQUENCES}")


def expand(items) -> tuple[int, ...]:
    """Lengths from a mix's items: ints, or 'LxN' for N sequences of L tokens (ValueError
    naming the bad item otherwise)."""
    out: list[int] = []
    for i, item in enumerate(items):
        if isinstance(item, int) and not isinstance(item, bool):
            length, count = item, 1
        else:
            m = _ITEM.fullmatch(str(item).strip())
            if not isinstance(item, str) or not m:
                raise ValueError(f"item {i}: {item!r} is not a length: give an int, or 'LxN' for "
                                 f"N sequences of L tokens (e.g. 256x4)")
            length, count = int(m.group(1)), int(m.group(2) or 1)
        if length < 1 or count < 1:
            raise ValueError(f"item {i}: {item!r}: lengths and counts must be >= 1")
        check_count(len(out) + count, i, item)
        out += [length] * count
    return tuple(out)


def varlen_text(lengths) -> str:
    """The CSV cell and key of a mix: '512,2048,256', runs written 'LxN' ('8192,256x4')."""
    parts, i = [], 0
    while i < len(lengths):
        j = i
        while j < len(lengths) and lengths[j] == lengths[i]:
            j += 1
        parts.append(str(lengths[i]) if j - i == 1 else f"{lengths[i]}x{j - i}")
        i = j
    return ",".join(parts)


def parse_varlen(text) -> variants.Documents | None:
    """The mix of a point (its lengths in turn, ``variants.Documents``); None for no varlen."""
    if text is None or text == "":
        return None
    return variants.Documents(expand(str(text).split(",")))


# -- a point's layout -----------------------------------------------------------------------------

def kv_heads(point) -> int:
    """Hkv = Hq / G."""
    return point.heads // point.group


def sequences(point) -> variants.Documents | None:
    """The point's varlen mix, or None."""
    return parse_varlen(point.varlen)


def packed_varlen(point) -> bool:
    """Whether the call is ``attention_varlen`` on a packed batch."""
    return point.varlen is not None and point.layout != "padded"


def materialized(point) -> bool:
    return point.layout == "materialized"


def applies(layout: str | None, causal: bool, mask, varlen, group: int) -> bool:
    """Whether a method of ``layout`` has a point here: padded needs documents or a varlen mix
    and causal (the pads are hidden from the real queries by causal alone); materialized needs
    G > 1."""
    if layout == "padded":
        return (mask is not None or varlen is not None) and causal
    if layout == "materialized":
        return group > 1
    return True


def groups(spec: tuple, heads: int) -> tuple[int, ...]:
    """The group sizes of a sweep's ``group`` axis at ``heads`` query heads ('heads': MQA)."""
    return tuple(dict.fromkeys(heads if g == MQA else int(g) for g in spec))


def run_shape(point) -> tuple[int, int, int, int]:
    """(batch, Hq, T, S) of the dense problem the arrays pose: the padded batch
    (batch·n, Hq, max_len, max_len), a packed batch's rows (batch, Hq, seq_len, seq_len: an
    upper bound on what it runs, for host-memory estimates), or ``variants.run_shape``."""
    seqs = sequences(point)
    if seqs is not None:
        if point.layout == "padded":
            n, longest = seqs.padded(point.seq_len)
            return point.batch * n, point.heads, longest, longest
        return point.batch, point.heads, point.seq_len, point.seq_len
    return variants.run_shape(point)


def problems(point) -> list[tuple[int, int, int, object]]:
    """The attention problems the call runs, as the IO model takes them: [(batch·heads, T, S,
    mask)]. A packed varlen batch runs each sequence as its own problem (grouped by length);
    everything else one problem (``run_shape`` under ``variants.model_mask``)."""
    if packed_varlen(point):
        lengths = sequences(point).in_row(point.seq_len)
        band = variants.band(point)
        return [(point.batch * point.heads * lengths.count(L), L, L, band)
                for L in dict.fromkeys(lengths)]
    b, h, T, S = run_shape(point)
    return [(b * h, T, S, variants.model_mask(point))]


def run_scores(point) -> int:
    """Score entries of what runs (naive and the oracle materialize them)."""
    return sum(bh * T * S for bh, T, S, _ in problems(point))


def flops(point) -> float:
    """FLOPs of the real work: ``variants.flops``, with a varlen mix's sequences as documents
    of the row (their visible pairs are those of each sequence alone)."""
    seqs = sequences(point)
    if seqs is None:
        return variants.flops(point)
    return variants.flops(point, work=seqs.model_mask(variants.band(point), point.seq_len))


def input_shapes(point) -> dict[str, tuple[int, ...]]:
    """Shapes of the arrays a call is handed: q, k, v (and dout for a backward pass); k and v
    with Hkv heads (materialized repeats them inside the call)."""
    hkv, d = kv_heads(point), point.head_dim
    if packed_varlen(point):
        rows = point.batch * point.seq_len
        shapes = {"q": (rows, point.heads, d), "k": (rows, hkv, d), "v": (rows, hkv, d)}
    else:
        b, h, T, S = run_shape(point)
        shapes = {"q": (b, h, T, d), "k": (b, hkv, S, d), "v": (b, hkv, S, d)}
    if point.pass_ != "forward":
        shapes["dout"] = shapes["q"]
    return shapes


def cu_seqlens(point) -> np.ndarray | None:
    """int32 (sequences + 1,) starts of a packed batch's sequences (every row's in turn), or
    None for a dense call."""
    if not packed_varlen(point):
        return None
    lengths = sequences(point).in_row(point.seq_len) * point.batch
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def _itemsize(point) -> int:
    from .hostmem import _itemsize
    return _itemsize(point.dtype)


def held_bytes(point) -> dict[str, int]:
    """``kv_bytes`` (K and V as the layout holds them: G times for materialized) and
    ``qkv_bytes`` (those and q)."""
    shapes = input_shapes(point)
    e = _itemsize(point)
    kv = sum(int(np.prod(shapes[n])) for n in ("k", "v")) * e
    if materialized(point):
        kv *= point.group
    return {"kv_bytes": kv, "qkv_bytes": kv + int(np.prod(shapes["q"])) * e}


def extra_traffic(point) -> iomodel.Traffic:
    """Bytes the layout moves besides attention: materialized forward reads K and V and writes
    them G times; its backward reads dK, dV per query head and writes their group sums."""
    if not materialized(point):
        return iomodel.Traffic(0, 0, 0.0)
    kv = held_bytes(point)["kv_bytes"] // point.group           # K and V once, Hkv heads
    read = written = 0
    if point.pass_ in ("forward", "both"):
        read, written = read + kv, written + kv * point.group
    if point.pass_ in ("backward", "both"):
        read, written = read + kv * point.group, written + kv
    return iomodel.Traffic(read, written, 0.0)


# -- the calls ------------------------------------------------------------------------------------

def head_axis(point) -> int:
    """The head axis of q, k, v: -2 packed ((total, H, d)), else -3."""
    return -2 if packed_varlen(point) else -3


def kv_for_call(point, k, v, xp):
    """K and V as the method reads them: as they are, or (materialized) each kv head repeated G
    times along the head axis (query head h reads repeated head h, i.e. kv head h // G)."""
    if not materialized(point):
        return k, v
    ax = head_axis(point)
    return xp.repeat(k, point.group, axis=ax), xp.repeat(v, point.group, axis=ax)


def fold(point, g, xp):
    """A gradient with Hq heads (materialized) summed over each group back to Hkv heads, in its
    dtype (accumulated in float32 for 16-bit, as autograd's sum of a repeat)."""
    ax = g.ndim + head_axis(point)
    hq = g.shape[ax]
    grouped = g.reshape(g.shape[:ax] + (hq // point.group, point.group) + g.shape[ax + 1:])
    wide = xp.float64 if g.dtype == xp.float64 else xp.float32
    return grouped.sum(axis=ax + 1, dtype=wide).astype(g.dtype)


def fold_grads(point, grads, xp) -> tuple:
    """(dq, dk, dv) of the call as gradients of the point's own q, k, v."""
    if not materialized(point):
        return tuple(grads)
    dq, dk, dv = grads
    return dq, fold(point, dk, xp), fold(point, dv, xp)


def positional(point, inputs: dict) -> tuple:
    """Arguments after q, k, v: (cu_seqlens_q, cu_seqlens_k) of a packed batch, else ()."""
    if packed_varlen(point):
        return inputs["cu_seqlens"], inputs["cu_seqlens"]
    return ()


def functions(point, kind: str):
    """(forward, backward) of the point's layout for ``kind``: 'api' (``cuflash.attention`` /
    ``attention_backward``, or ``attention_varlen`` whose residuals ``attention_backward``
    takes), 'naive' (``naive_attention[_varlen][_backward]``) or 'oracle' (float64, returning
    (out, lse) and the gradients). Each forward takes (q, k, v, *positional, **options)."""
    from .. import api, naive, oracle, varlen
    packed = packed_varlen(point)
    if kind == "api":
        return (varlen.attention_varlen if packed else api.attention), api.attention_backward
    if kind == "naive":
        return ((naive.naive_attention_varlen, naive.naive_attention_varlen_backward) if packed
                else (naive.naive_attention, naive.naive_attention_backward))
    if kind == "oracle":
        return ((oracle.oracle_attention_varlen, oracle.oracle_backward_varlen) if packed
                else (oracle.oracle_attention, oracle.oracle_backward))
    raise ValueError(f"kind={kind!r} must be 'api', 'naive' or 'oracle'")


# -- torch, notes, text ---------------------------------------------------------------------------

def torch_refusal(point) -> str | None:
    """Why torch's SDPA does not run this layout (None: it does, GQA through enable_gqa)."""
    if packed_varlen(point):
        return ("torch SDPA has no packed varlen batch (cu_seqlens); the padded layout is its "
                "way to run mixed lengths")
    if materialized(point):
        return "the materialized K/V baseline is cuflash's; torch reads GQA with enable_gqa"
    return None


def model_notes(point) -> list[str]:
    """What the predicted bytes of this point leave out (the twin repeats K/V per query head
    itself, so its counts are exact)."""
    if (point.group > 1 and not materialized(point) and point.method_name == "flash"
            and point.device == "gpu"):
        return ["pred_bytes: counted per query head: the K/V tile loads (issued per query "
                "head; L2 serves a group's repeats) and the backward's K/V reads and dK/dV "
                "writes (the dK/dV kernels do these once per kv head)"]
    return []


def describe(point) -> str:
    """' G=4 (Hkv=4) K/V materialized varlen(512,2048) padded to 3x2048' (empty for none)."""
    parts = []
    if point.group > 1:
        parts.append(f"G={point.group} (Hkv={kv_heads(point)})")
    if materialized(point):
        parts.append("K/V materialized")
    seqs = sequences(point)
    if seqs is not None:
        parts.append(f"varlen({point.varlen})")
        if point.layout == "padded":
            n, longest = seqs.padded(point.seq_len)
            parts.append(f"padded to {point.batch * n}x{longest}")
        else:
            parts.append(f"packed ({len(seqs.in_row(point.seq_len)) * point.batch} sequences)")
    return "".join(" " + p for p in parts)


__all__ = ["LAYOUTS", "LAYOUT_COLUMNS", "HELD_COLUMNS", "expand", "varlen_text", "parse_varlen",
           "applies", "groups", "run_shape", "problems", "flops", "input_shapes", "cu_seqlens",
           "held_bytes", "extra_traffic", "kv_for_call", "fold_grads", "functions",
           "torch_refusal", "describe"]
