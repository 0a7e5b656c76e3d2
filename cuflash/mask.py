"""Which keys each query sees: the one mask rule of cuflash, at the level of elements and tiles.

Query i (0 <= i < T) sees key j (0 <= j < S) iff

    i + S - T - left  <=  j  <=  i + S - T + right

with ``left`` and ``right`` non-negative ints or None (unbounded): FlashAttention-2's
``window_size``, aligned to the bottom-right corner so that the last query sits on the last key
when S != T. ``causal`` is ``right = 0``; a sliding window of w keys ending at the query is
``left = w - 1, right = 0``; no mask at all is ``left = right = None``. A bound of UNBOUNDED (2^30)
keys or more hides nothing from sequences shorter than 2^29 and is taken as None (the kernels'
kUnbounded, params.cuh). A query that sees no key gets out = 0 and lse = -inf.

The same rule is read by the CPU twin (``cuflash.twin``), the naive baseline and the float64
oracle (``visible``), the IO model (``key_range``, ``query_range``: bytes and FLOPs count only the
tiles visited) and the kernels (``kernels_cu/mask.cuh``, which has the same names: key_begin,
key_end, query_begin, query_end, tile_needs_mask, visible).
"""
from __future__ import annotations

import collections.abc
import dataclasses
import numbers

import numpy as np

#: A window side this wide or wider is unbounded (kernels_cu/params.cuh kUnbounded): it hides
#: nothing while T and S are below 2^29 (as kernels_cu/mask.cuh says of kUnbounded), and int64
#: index arithmetic (i + S - T + right) stays far from overflow.
UNBOUNDED = 1 << 30


def _bound(name: str, value) -> int | None:
    """A window entry: None or -1 (unbounded), else a non-negative int (UNBOUNDED or more:
    unbounded)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}={value!r} must be a non-negative int, or None / -1 for unbounded")
    value = int(value)
    if value == -1:
        return None
    if value < 0:
        raise ValueError(f"{name}={value!r} must be a non-negative int, or None / -1 for unbounded")
    return None if value >= UNBOUNDED else value


@dataclasses.dataclass(frozen=True)
class Mask:
    """The band of keys each query sees (see the module docstring); frozen and hashable."""

    left: int | None = None
    """Keys before the diagonal a query sees (None: all of them)."""

    right: int | None = None
    """Keys after the diagonal a query sees (None: all of them; 0: causal)."""

    @classmethod
    def make(cls, causal=False, window=None) -> "Mask":
        """The mask of ``attention(..., causal=, window=)``: ``window=(left, right)`` with entries
        as in the module docstring; ``causal=True`` intersects it with right = 0."""
        if not isinstance(causal, (bool, np.bool_)):
            raise TypeError(f"causal must be a bool, got {causal!r}")
        if window is None:
            left = right = None
        else:
            if (isinstance(window, (str, bytes))
                    or not isinstance(window, (collections.abc.Sequence, np.ndarray))
                    or len(window) != 2):
                raise TypeError(f"window={window!r} must be a pair (left, right) of non-negative "
                                f"ints or None / -1 (unbounded), or None")
            left = _bound("window[0] (left)", window[0])
            right = _bound("window[1] (right)", window[1])
        if causal:
            right = 0 if right is None else min(right, 0)
        return cls(left, right)

    # -- what kind of mask -------------------------------------------------------------------

    @property
    def causal(self) -> bool:
        """True when no query sees a key past its diagonal (right == 0)."""
        return self.right == 0

    @property
    def dense(self) -> bool:
        """True when every query sees every key."""
        return self.left is None and self.right is None

    def short(self) -> str:
        """A label for kernel names and tables: 'dense', 'causal', 'window_L_R' ('inf' for an
        unbounded side)."""
        if self.dense:
            return "dense"
        if self.left is None and self.right == 0:
            return "causal"
        fmt = lambda x: "inf" if x is None else str(x)
        return f"window_{fmt(self.left)}_{fmt(self.right)}"

    # -- elements ----------------------------------------------------------------------------

    def visible(self, i, j, T: int, S: int):
        """Whether query i sees key j (arrays broadcast; NumPy or CuPy integers). Keys outside
        0..S-1 and queries outside 0..T-1 are hidden."""
        diag = S - T
        ok = (j >= 0) & (j < S) & (i >= 0) & (i < T)
        if self.left is not None:
            ok = ok & (j >= i + diag - self.left)
        if self.right is not None:
            ok = ok & (j <= i + diag + self.right)
        return ok

    def visible_matrix(self, T: int, S: int, xp=np):
        """(T, S) bool array of :meth:`visible`."""
        return self.visible(xp.arange(T)[:, None], xp.arange(S)[None, :], T, S)

    def visible_pairs(self, T: int, S: int) -> int:
        """Number of (query, key) pairs that are visible (the scores that count as work)."""
        if T <= 0 or S <= 0:
            return 0
        i = np.arange(T, dtype=np.int64)
        lo, hi = self._row_range(i, T, S)
        return int(np.clip(hi - lo, 0, None).sum())

    def _row_range(self, i, T, S):
        """[lo, hi) of the keys query row(s) i see, clipped to 0..S."""
        diag = S - T
        lo = np.zeros_like(i) if self.left is None else np.clip(i + diag - self.left, 0, S)
        hi = np.full_like(i, S) if self.right is None else np.clip(i + diag + self.right + 1, 0, S)
        return lo, hi

    # -- tiles -------------------------------------------------------------------------------

    def key_range(self, i0: int, i1: int, T: int, S: int) -> tuple[int, int]:
        """[lo, hi): the keys that at least one query of rows i0..i1-1 sees (lo >= hi: none).
        Rows past T count as rows (kernels pass their tile's nominal end)."""
        diag = S - T
        lo = 0 if self.left is None else max(0, i0 + diag - self.left)
        hi = S if self.right is None else min(S, max(0, i1 - 1 + diag + self.right + 1))
        return lo, hi

    def query_range(self, j0: int, j1: int, T: int, S: int) -> tuple[int, int]:
        """[lo, hi): the queries that see at least one key of rows j0..j1-1."""
        diag = S - T
        lo = 0 if self.right is None else max(0, j0 - diag - self.right)
        hi = T if self.left is None else min(T, max(0, j1 - 1 - diag + self.left + 1))
        return lo, hi

    def key_begin(self, i0: int, i1: int, T: int, S: int, block_n: int) -> int:
        """First key tile (a multiple of block_n) that query rows i0..i1-1 visit."""
        lo, _ = self.key_range(i0, i1, T, S)
        return (lo // block_n) * block_n

    def key_end(self, i0: int, i1: int, T: int, S: int) -> int:
        """One past the last key that query rows i0..i1-1 visit (tiles run from key_begin to
        here in steps of block_n; no tile when key_end <= key_begin)."""
        lo, hi = self.key_range(i0, i1, T, S)
        return hi if hi > lo else 0

    def key_tiles(self, i0: int, i1: int, T: int, S: int, block_n: int) -> range:
        """Starts j0 of the key tiles that query rows i0..i1-1 visit."""
        return range(self.key_begin(i0, i1, T, S, block_n), self.key_end(i0, i1, T, S), block_n)

    def query_begin(self, j0: int, j1: int, T: int, S: int, block_m: int) -> int:
        """First query tile (a multiple of block_m) that sees a key of rows j0..j1-1."""
        lo, _ = self.query_range(j0, j1, T, S)
        return (lo // block_m) * block_m

    def query_end(self, j0: int, j1: int, T: int, S: int) -> int:
        """One past the last query that sees a key of rows j0..j1-1."""
        lo, hi = self.query_range(j0, j1, T, S)
        return hi if hi > lo else 0

    def query_tiles(self, j0: int, j1: int, T: int, S: int, block_m: int) -> range:
        """Starts i0 of the query tiles that see a key of rows j0..j1-1."""
        return range(self.query_begin(j0, j1, T, S, block_m), self.query_end(j0, j1, T, S),
                     block_m)

    def tile_needs_mask(self, i0: int, i1: int, j0: int, j1: int, T: int, S: int) -> bool:
        """Whether some pair of the tile rows i0..i1-1 × keys j0..j1-1 is hidden: the tile then
        needs the per-element rule; otherwise every score of it counts."""
        if j1 > S or i1 > T:
            return True
        diag = S - T
        if self.right is not None and j1 - 1 > i0 + diag + self.right:
            return True
        if self.left is not None and j0 < i1 - 1 + diag - self.left:
            return True
        return False


def split_share(n: int, s: int, splits: int) -> range:
    """Split-KV: the indices of the tiles, of a query tile's list of n, that split s of `splits`
    visits: ceil(n / splits) each, in order (kernels_cu/block.cuh, QueryBlock::split_share)."""
    per = -(-n // splits)
    first = min(n, s * per)
    return range(first, first + min(per, n - first))

