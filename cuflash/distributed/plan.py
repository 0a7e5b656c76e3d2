"""Which local attention calls one ring step makes: global positions -> per-call masks.

Rank r holds the queries of its chunks (``layout.chunk_ranges``); at ring step s it holds the keys
and values of rank (r - s) mod N. The global mask is cuflash's one rule (``cuflash.mask``) on
global positions, with as many queries as keys (T = S = seq_len, so the diagonal is j = i):

    query i sees key j  iff  -left <= j - i <= right      (None: unbounded; causal: right = 0)

For one rectangle of local queries × local keys this is again a band on the local difference
x = j_local - i_local as long as the global offset between the rows is the same for every chunk
pair in it; ``step_calls`` finds the fewest such rectangles that cover every visible pair
(one per step for zigzag and contiguous, causal or not), trims each to the bounding box of its
visible pairs, and expresses the band there in cuflash's bottom-right-aligned form
``Mask(left, right)`` — which is then always non-negative (the bottom-right corner of the
bounding box of a band is inside the band). Causal zigzag, for example, gives

* step 0 (own keys): one call over all local rows with ``causal`` (chunk r sees itself causally,
  chunk 2N-1-r sees chunk r whole and itself causally; chunk r does not see chunk 2N-1-r);
* a step whose keys come from a lower rank: all local queries × the first key chunk, dense;
* from a higher rank: the second query chunk × all local keys, dense;

so every rank computes the same number of visible pairs at every step (``work_per_rank``).
Sliding windows give trimmed rectangles with windowed masks, and key blocks no query sees are
skipped. With a mask_mod (which reads global i and j) a call must cover globally contiguous
queries and keys, so that i_global = i_local + q_pos (``contiguous_only``).
"""
from __future__ import annotations

import dataclasses
import itertools

from ..mask import Mask
from .layout import chunk_ranges


@dataclasses.dataclass(frozen=True)
class Call:
    """One local attention call of a ring step.

    q : (q0, q1) rows of the rank's local queries; k : (k0, k1) rows of the key/value block held
    at this step; mask : the mask of the call in its own coordinates (T' = q1 - q0 queries,
    S' = k1 - k0 keys, bottom-right aligned as ``cuflash.attention`` takes it); q_pos, k_pos :
    global positions of rows q0 and k0 when the call's queries (keys) are globally contiguous,
    else None.
    """

    q: tuple
    k: tuple
    mask: Mask
    q_pos: int | None = None
    k_pos: int | None = None

    def attention_kwargs(self) -> dict:
        """causal/window arguments of ``cuflash.attention`` for this call's mask."""
        m = self.mask
        if m.dense:
            return dict(causal=False, window=None)
        if m.left is None and m.right == 0:
            return dict(causal=True, window=None)
        return dict(causal=False, window=(m.left, m.right))

    def visible_pairs(self) -> int:
        """Number of (query, key) pairs the call computes (its work)."""
        return self.mask.visible_pairs(self.q[1] - self.q[0], self.k[1] - self.k[0])


@dataclasses.dataclass(frozen=True)
class _Seg:
    """A chunk of a local buffer: global start, local start, length."""
    pos: int
    loc: int
    n: int


def _segs(ranges):
    out, loc = [], 0
    for a, b in ranges:
        out.append(_Seg(a, loc, b - a))
        loc += b - a
    return out


def global_band(mask: Mask):
    """(lo, hi) with query i seeing key j iff lo <= j - i <= hi (None: unbounded), for T = S."""
    return (None if mask.left is None else -mask.left,
            None if mask.right is None else mask.right)


def canonical(lo, hi, T, S):
    """The band lo <= j - i <= hi restricted to a T × S rectangle, as a comparable value: None if
    it holds no pair, else its bounds clipped to the rectangle's range [-(T-1), S-1]."""
    if T <= 0 or S <= 0:
        return None
    xmin, xmax = -(T - 1), S - 1
    a = xmin if lo is None else max(lo, xmin)
    b = xmax if hi is None else min(hi, xmax)
    return (a, b) if a <= b else None


def _shift(a, d):
    return None if a is None else a + d


def _pair_target(qs: _Seg, ks: _Seg, lo, hi):
    """The global band of one chunk pair in the pair's own coordinates (canonical)."""
    off = ks.pos - qs.pos
    return canonical(_shift(lo, -off), _shift(hi, -off), qs.n, ks.n)


def _trimmed(LO, HI, T, S):
    """Bounding box [i0, i1) × [j0, j1) of the pairs with LO <= j - i <= HI in a T × S rectangle
    and the Mask that gives exactly those pairs on it; None when there are none."""
    if canonical(LO, HI, T, S) is None:
        return None
    i0 = 0 if HI is None else max(0, -HI)
    i1 = T if LO is None else min(T, S - LO)
    j0 = 0 if LO is None else max(0, LO)
    j1 = S if HI is None else min(S, T + HI)
    if i0 >= i1 or j0 >= j1:
        return None
    Tn, Sn = i1 - i0, j1 - j0
    # band on the trimmed coordinates: x'' = x - (j0 - i0); bottom-right form
    left = None if LO is None else (j1 - i1) - LO
    right = None if HI is None else HI - (j1 - i1)
    assert (left is None or left >= 0) and (right is None or right >= 0), (LO, HI, T, S)
    if left is not None and left >= Sn - 1:
        left = None
    if right is not None and right >= Tn - 1:
        right = None
    return (i0, i1, j0, j1), Mask(left, right)


def _try_call(qsegs, ksegs, lo, hi, contiguous_only):
    """A Call covering the local rows of chunks qsegs × ksegs (consecutive in local order) whose
    one band reproduces the global mask on every chunk pair; None if no pair is visible;
    False if no single band does (or, with contiguous_only, the rows are not globally
    contiguous)."""
    q_contig = all(s.pos - s.loc == qsegs[0].pos - qsegs[0].loc for s in qsegs)
    k_contig = all(s.pos - s.loc == ksegs[0].pos - ksegs[0].loc for s in ksegs)
    if contiguous_only and not (q_contig and k_contig):
        return False
    qbase, kbase = qsegs[0].loc, ksegs[0].loc
    T = sum(s.n for s in qsegs)
    S = sum(s.n for s in ksegs)
    pairs = []
    for a in qsegs:
        for b in ksegs:
            d = (b.loc - kbase) - (a.loc - qbase)   # x_call = x_pair + d
            pairs.append((a, b, d, _pair_target(a, b, lo, hi)))
    # candidate bounds: each pair's global bound moved into the call's coordinates
    los = [None] + sorted({lo - (b.pos - a.pos) + d for a, b, d, _ in pairs} if lo is not None
                          else set())
    his = [None] + sorted({hi - (b.pos - a.pos) + d for a, b, d, _ in pairs} if hi is not None
                          else set())
    for LO, HI in itertools.product(los, his):
        if LO is not None and HI is not None and LO > HI:
            continue
        if all(canonical(_shift(LO, -d), _shift(HI, -d), a.n, b.n) == t for a, b, d, t in pairs):
            box = _trimmed(LO, HI, T, S)
            if box is None:
                return None
            (i0, i1, j0, j1), m = box
            q_pos = qsegs[0].pos - qsegs[0].loc + qbase + i0 if q_contig else None
            k_pos = ksegs[0].pos - ksegs[0].loc + kbase + j0 if k_contig else None
            return Call((qbase + i0, qbase + i1), (kbase + j0, kbase + j1), m, q_pos, k_pos)
    return False


def _calls(qsegs, ksegs, lo, hi, contiguous_only) -> list:
    live = [(a, b) for a, qs in enumerate(qsegs) for b, ks in enumerate(ksegs)
            if _pair_target(qs, ks, lo, hi) is not None]
    if not live:
        return []

    def span(idx):
        return range(min(idx), max(idx) + 1)

    def attempt(groups):
        """Calls for a list of (q chunk indices, k chunk indices), or None if one fails."""
        out = []
        for A, B in groups:
            c = _try_call([qsegs[a] for a in A], [ksegs[b] for b in B], lo, hi, contiguous_only)
            if c is False:
                return None
            if c is not None:
                out.append(c)
        return out

    whole = attempt([(span([a for a, _ in live]), span([b for _, b in live]))])
    if whole is not None:
        return whole
    rows = sorted({a for a, _ in live})
    cols = sorted({b for _, b in live})
    by_row = attempt([([a], span([b for x, b in live if x == a])) for a in rows])
    by_col = attempt([(span([a for a, y in live if y == b]), [b]) for b in cols])
    options = [c for c in (by_row, by_col) if c is not None]
    if options:
        return min(options, key=len)
    return attempt([([a], [b]) for a, b in live])   # one chunk pair each: always one band


def step_calls(seq_len, world_size, rank, source, layout="zigzag", mask=Mask(), *,
               contiguous_only=False) -> list:
    """The calls of rank ``rank`` against the key block of rank ``source`` (the block it holds at
    ring step (rank - source) mod world_size), for a sequence of seq_len positions with the
    global ``mask`` (a ``cuflash.mask.Mask``). Every visible (query, key) pair is in exactly one
    call and no call computes a hidden pair. ``contiguous_only``: each call's queries and keys
    are globally contiguous (q_pos, k_pos set), as a mask_mod needs."""
    qsegs = _segs(chunk_ranges(seq_len, world_size, rank, layout))
    ksegs = _segs(chunk_ranges(seq_len, world_size, source, layout))
    lo, hi = global_band(mask)
    return _calls(qsegs, ksegs, lo, hi, contiguous_only)


def ring_plan(seq_len, world_size, rank, layout="zigzag", mask=Mask(), *,
              contiguous_only=False) -> list:
    """[step_calls for step s = 0 .. world_size-1], step s holding the keys of rank
    (rank - s) mod world_size."""
    return [step_calls(seq_len, world_size, rank, (rank - s) % world_size, layout, mask,
                       contiguous_only=contiguous_only) for s in range(world_size)]


def pair_kinds(seq_len, world_size, layout="zigzag", mask=Mask()) -> dict:
    """{(query chunk, key chunk): kind} over the global chunks (N or 2N of them, by position),
    kind 'dense' (every pair visible), 'causal' (the diagonal block of a causal mask), 'band'
    (some other cut), or 'none' (skipped)."""
    n = world_size * (1 if layout == "contiguous" else 2)
    c = seq_len // n if n else 0
    chunk_ranges(seq_len, world_size, 0, layout)          # checks the arguments
    lo, hi = global_band(mask)
    out = {}
    for a in range(n):
        for b in range(n):
            qs, ks = _Seg(a * c, 0, c), _Seg(b * c, 0, c)
            t = _pair_target(qs, ks, lo, hi)
            box = None if t is None else _trimmed(t[0], t[1], c, c)
            if box is None:
                out[a, b] = "none"
            elif box[1].dense:
                out[a, b] = "dense"
            elif box[1] == Mask(None, 0) and box[0] == (0, c, 0, c):
                out[a, b] = "causal"
            else:
                out[a, b] = "band"
    return out


def work_per_rank(seq_len, world_size, layout="zigzag", mask=Mask()) -> list:
    """Visible (query, key) pairs each rank computes over the whole ring (load balance)."""
    return [sum(c.visible_pairs() for step in ring_plan(seq_len, world_size, r, layout, mask)
                for c in step) for r in range(world_size)]


__all__ = ["Call", "step_calls", "ring_plan", "pair_kinds", "work_per_rank", "global_band",
           "canonical"]
