"""Attention variants in experiments: what the axes ``window``, ``softcap``, ``alibi`` and ``mask``
and the method option ``layout: padded`` mean, in one place. (GQA's ``group``, varlen batches
and ``layout: materialized`` are memory layouts of a problem: ``cuflash.experiments.layouts``,
which builds on this module.)

A point's variant (``points.Point``: window, softcap, alibi, mask, layout) becomes here

* the keyword arguments of ``cuflash.attention``, the naive path and the float64 oracle
  (:func:`call_options`): every method runs the same problem;
* the shapes that actually run (:func:`run_shape`: the padded layout runs other shapes);
* the mask the IO model counts (:func:`model_mask`: bytes and FLOPs count only the tiles and the
  score pairs the mask leaves, ``cuflash.iomodel``), and the FLOPs of the real work
  (:func:`flops`);
* the texts of the CSV columns (:func:`window_text`, ``Documents.text``) and back.

ALiBi: :func:`alibi_slopes` (one slope per head, 2^(-8k/H), k = 1..H).

Documents (``mask: {kind: documents, lengths: [l1, l2, ...]}``): each row of T tokens holds
documents of lengths l1, l2, ... in turn, repeated until the row is full (the last one cut at T);
every batch row holds the same documents. A query sees a key only inside its own document (and
only as causal and window allow). Two ways to run them:

* packed (the default): the row as it is, with ``MaskMod("doc[b, i] == doc[b, j]", doc=ids)``,
  ids int32 (batch, T) (:meth:`Documents.mask_mod`); needs kv_len = seq_len;
* padded (a method with ``layout: padded``): each document its own batch entry, padded to the
  longest document of the row, causal, no mask_mod: batch·n_docs entries of length max(L). The
  pads come after each document's tokens, so causal hides them from its real queries (the pads'
  own outputs are computed and ignored); hence padded needs causal.

FLOPs count only real work: the visible score pairs of the real tokens (4·d FLOPs each forward,
2.5× that backward), the same number for packed and padded, so their TFLOP/s compare useful work
and their time ratio is the saving. Predicted bytes count what each layout moves: packed with
:class:`DocumentMask` (the key tiles a query tile visits are those its documents reach, which is
what the twin and the kernels' mask_mod tile lists visit), padded with its own band mask over the
padded shapes (pads included).
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np

from .. import iomodel
from ..mask import Mask
from ..mask_mod import MaskMod

#: Variant columns of the results (besides ``causal``); ``points.KEY_COLUMNS`` includes them.
VARIANT_COLUMNS = ("window", "softcap", "alibi", "mask")
#: Named custom masks an experiment may sweep (``mask: {kind: ...}``).
MASK_KINDS = ("documents",)
#: Method layouts: 'packed' (the problem as it is, the default) and 'padded' (documents as a
#: padded batch).
LAYOUTS = ("packed", "padded")


# -- ALiBi ----------------------------------------------------------------------------------------

def alibi_slopes(heads: int, xp=np):
    """ALiBi slopes for ``heads`` heads: 2^(-8k/H) for k = 1..H, float32, shape (H,), on array
    module ``xp`` (Press et al., "Train Short, Test Long", 2022: the geometric sequence starting
    at 2^(-8/H); the paper defines it for H a power of 2 and interpolates otherwise; here the
    formula is used as it is for every H)."""
    k = np.arange(1, heads + 1, dtype=np.float64)
    return xp.asarray((2.0 ** (-8.0 * k / heads)).astype(np.float32))


# -- window ---------------------------------------------------------------------------------------

def window_text(window) -> str | None:
    """'255,0' for window (255, 0); an unbounded side is -1 (FlashAttention-2's convention);
    None for no window."""
    if window is None:
        return None
    return ",".join("-1" if w is None else str(int(w)) for w in window)


def parse_window(text):
    """(left, right) from :func:`window_text`'s form (None for '' or None)."""
    if text is None or text == "":
        return None
    left, right = (int(x) for x in str(text).split(","))
    return tuple(None if w == -1 else w for w in (left, right))


# -- documents ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Documents:
    """Documents of ``lengths`` packed in turn into each row (see the module docstring)."""

    lengths: tuple[int, ...]

    def __post_init__(self):
        if not self.lengths or any(not isinstance(n, int) or isinstance(n, bool) or n < 1
                                   for n in self.lengths):
            raise ValueError(f"documents: lengths must be positive ints, got {self.lengths!r}")

    def text(self) -> str:
        """The CSV cell and key: 'documents(512,2048,256)'."""
        return f"documents({','.join(map(str, self.lengths))})"

    def in_row(self, T: int) -> list[int]:
        """Lengths of the documents in a row of T tokens: ``lengths`` in turn, the last cut."""
        out, used, k = [], 0, 0
        while used < T:
            n = min(self.lengths[k % len(self.lengths)], T - used)
            out.append(n)
            used += n
            k += 1
        return out

    def ids(self, T: int) -> np.ndarray:
        """int32 (T,): the document of each token."""
        return np.repeat(np.arange(len(self.in_row(T)), dtype=np.int32), self.in_row(T))

    def mask_mod(self, batch: int, T: int, xp=np) -> MaskMod:
        """The packed rows' custom mask: a query sees keys of its own document."""
        ids = np.broadcast_to(self.ids(T), (batch, T))
        return MaskMod("doc[b, i] == doc[b, j]", doc=xp.asarray(np.ascontiguousarray(ids)))

    def padded(self, T: int) -> tuple[int, int]:
        """(documents per row, longest document): the padded layout runs batch·n entries of
        that length."""
        docs = self.in_row(T)
        return len(docs), max(docs)

    def model_mask(self, band: Mask, T: int) -> "DocumentMask":
        """The packed problem's mask for the IO model: ``band`` within each document."""
        starts = np.cumsum([0] + self.in_row(T))
        return DocumentMask(band.left, band.right, tuple(int(s) for s in starts))


_DOCS = re.compile(r"documents\(([0-9]+(?:,[0-9]+)*)\)")


def parse_mask(text):
    """A mask spec (:class:`Documents`) from its text (``Documents.text``); None for none."""
    if text is None or text == "":
        return None
    m = _DOCS.fullmatch(str(text))
    if not m:
        raise ValueError(f"mask={text!r} is not a known mask; expected e.g. "
                         f"'documents(512,2048)' (kinds: {list(MASK_KINDS)})")
    return Documents(tuple(int(x) for x in m.group(1).split(",")))


@dataclasses.dataclass(frozen=True)
class DocumentMask(Mask):
    """A band (``left``, ``right``, as :class:`cuflash.mask.Mask`) inside documents that start at
    ``starts`` (ascending, from 0, ending with the row length): query i sees key j iff the band
    admits the pair and both are in one document. For the IO model, which takes a Mask where it
    takes ``causal``: its tile ranges are the tiles the mask leaves. Only for T = S (the packed
    rows), where each query sees itself, so that the keys a run of queries sees are contiguous
    (and the queries that see a run of keys): the tile ranges below are exact, with no tile
    inside them hidden whole."""

    starts: tuple[int, ...] = ()

    @property
    def dense(self) -> bool:
        return False          # the documents hide pairs (naive applies its mask pass)

    def _doc(self, i):
        return np.searchsorted(np.asarray(self.starts), i, side="right") - 1

    def _bounds(self, i):
        """[start, end) of the document of token(s) i."""
        s = np.asarray(self.starts)
        k = self._doc(i)
        return s[k], s[k + 1]

    def _check(self, T, S):
        if T != S or T != self.starts[-1]:
            raise ValueError(f"DocumentMask of a row of {self.starts[-1]} tokens used with "
                             f"T={T}, S={S}")

    def visible(self, i, j, T: int, S: int):
        self._check(T, S)
        ok = Mask.visible(self, i, j, T, S)             # the band, and 0 <= i < T, 0 <= j < S
        same = self._doc(np.clip(i, 0, T - 1)) == self._doc(np.clip(j, 0, S - 1))
        return ok & same

    def visible_pairs(self, T: int, S: int) -> int:
        """Σ over documents of the band's pairs inside the document (a document's block sits on
        the diagonal, so its pairs are those of a band over a T = S = length problem)."""
        if T <= 0:
            return 0
        self._check(T, S)
        band = Mask(self.left, self.right)
        return sum(band.visible_pairs(n, n) for n in np.diff(self.starts).tolist())

    def key_range(self, i0: int, i1: int, T: int, S: int) -> tuple[int, int]:
        self._check(T, S)
        lo, hi = Mask.key_range(self, i0, i1, T, S)
        last = min(i1, T) - 1
        if last < i0:
            return 0, 0
        return max(lo, int(self._bounds(i0)[0])), min(hi, int(self._bounds(last)[1]))

    def query_range(self, j0: int, j1: int, T: int, S: int) -> tuple[int, int]:
        self._check(T, S)
        lo, hi = Mask.query_range(self, j0, j1, T, S)
        last = min(j1, S) - 1
        if last < j0:
            return 0, 0
        return max(lo, int(self._bounds(j0)[0])), min(hi, int(self._bounds(last)[1]))

    def tile_needs_mask(self, i0, i1, j0, j1, T, S) -> bool:
        if Mask.tile_needs_mask(self, i0, i1, j0, j1, T, S):
            return True
        docs = self._doc(np.array([i0, min(i1, T) - 1, j0, min(j1, S) - 1]))
        return len(set(docs.tolist())) > 1

    def short(self) -> str:
        return f"documents_{Mask(self.left, self.right).short()}"


# -- a point's variant ----------------------------------------------------------------------------

def band(point) -> Mask:
    """The band of the point's problem: causal and window (``Mask.make``)."""
    return Mask.make(causal=bool(point.causal), window=point.window)


def documents(point) -> Documents | None:
    return parse_mask(point.mask)


def padded(point) -> bool:
    return point.layout == "padded"


def run_shape(point) -> tuple[int, int, int, int]:
    """(batch, heads, T, S) of the arrays the point's call runs on: the point's own, or for the
    padded layout (batch·documents, heads, longest, longest)."""
    if padded(point):
        n, longest = documents(point).padded(point.seq_len)
        return point.batch * n, point.heads, longest, longest
    return point.batch, point.heads, point.seq_len, point.kv_len


def call_options(point, xp=np) -> dict:
    """Keyword arguments of ``cuflash.attention`` (and of the naive path and the oracle) for the
    point's variant, arrays on module ``xp``: causal, window, softcap, alibi_slopes (one per
    head, :func:`alibi_slopes`), mask_mod (packed documents). The padded layout runs its batch
    causal, without mask_mod."""
    opts: dict = {"causal": bool(point.causal)}
    if point.window is not None:
        opts["window"] = tuple(point.window)
    if point.softcap is not None:
        opts["softcap"] = float(point.softcap)
    if point.alibi:
        opts["alibi_slopes"] = alibi_slopes(point.heads, xp)
    docs = documents(point)
    if docs is not None and not padded(point):
        opts["mask_mod"] = docs.mask_mod(point.batch, point.seq_len, xp)
    return opts


def model_mask(point) -> Mask:
    """The mask the IO model counts for what the point runs: its band (padded: over the padded
    shapes), or inside its packed documents (:class:`DocumentMask`)."""
    docs = documents(point)
    if docs is None or padded(point):
        return band(point)
    return docs.model_mask(band(point), point.seq_len)


def work_mask(point) -> Mask:
    """The mask of the real work (the packed problem), whose visible pairs are the FLOPs."""
    docs = documents(point)
    return band(point) if docs is None else docs.model_mask(band(point), point.seq_len)


def flops(point, work: Mask | None = None) -> float:
    """FLOPs of the point's pass counting only visible scores of real tokens
    (``iomodel.attention_flops`` with :func:`work_mask`, or ``work``, the real work's mask over
    the point's (seq_len, kv_len) when another module knows it better (``layouts``: a varlen
    batch's sequences); 'both': forward + backward)."""
    mask = work_mask(point) if work is None else work
    args = (point.bh, point.seq_len, point.kv_len, point.head_dim, mask)
    total = 0.0
    if point.pass_ in ("forward", "both"):
        total += iomodel.attention_flops(*args)
    if point.pass_ in ("backward", "both"):
        total += iomodel.attention_flops(*args, backward=True)
    return total


def torch_refusal(point) -> str | None:
    """Why torch's SDPA cannot run this point's variant as a fused kernel (None: it can). Masks
    and biases that SDPA takes only as an explicit T×S attn_mask are naive-like, not measured."""
    why = []
    if point.window is not None:
        why.append("a sliding window")
    if point.softcap is not None:
        why.append("softcap")
    if point.alibi:
        why.append("ALiBi")
    if documents(point) is not None and not padded(point):
        why.append("a document mask")
    if not why:
        return None
    return (f"torch SDPA has no fused {' or '.join(why)}: it would take an explicit T x S "
            f"attn_mask (materialized, naive-like), which is not measured")


def model_notes(point) -> list[str]:
    """What the predicted bytes of this point leave out."""
    notes = []
    if point.method_name == "naive" or (point.method_name == "torch_sdpa"
                                        and point.backend == "math"):
        extra = [n for n, on in (("softcap", point.softcap is not None), ("ALiBi", point.alibi),
                                 ("mask_mod", documents(point) is not None
                                  and not padded(point))) if on]
        if extra:
            notes.append(f"pred_bytes: the naive model leaves out the T x S passes of "
                         f"{', '.join(extra)}")
    elif (point.method_name == "flash" and point.device == "gpu"
          and documents(point) is not None and not padded(point)):
        notes.append("pred_bytes: without the mask_mod's tile lists (built per call)")
    return notes


def describe(point) -> str:
    """' window=255,0 softcap=30 alibi documents(...) padded' (empty for no variant)."""
    parts = []
    if point.window is not None:
        parts.append(f"window={window_text(point.window)}")
    if point.softcap is not None:
        parts.append(f"softcap={point.softcap:g}")
    if point.alibi:
        parts.append("alibi")
    if point.mask is not None:
        parts.append(point.mask)
    if padded(point) and documents(point) is not None:      # (varlen: layouts.describe)
        n, longest = documents(point).padded(point.seq_len)
        parts.append(f"padded to {n}x{longest}")
    return "".join(" " + p for p in parts)


__all__ = ["alibi_slopes", "Documents", "DocumentMask", "call_options", "run_shape",
           "model_mask", "work_mask", "flops", "window_text", "parse_window", "parse_mask"]
