"""cuflash.mask: the tile-level answers (key_range, query_range, key/query tiles,
tile_needs_mask, visible_pairs) checked by brute force against the element rule ``visible``,
and the rule itself against its definition; bad windows are errors naming the entry."""
import itertools

import numpy as np
import pytest

from cuflash.mask import UNBOUNDED, Mask

SHAPES = [(1, 1), (7, 7), (5, 13), (13, 5), (64, 64), (33, 97), (97, 33)]
WINDOWS = [(None, None), (None, 0), (0, 0), (3, 0), (0, 2), (5, 7), (None, 4), (2, None),
           (100, 0), (0, 100)]


def _masks():
    for left, right in WINDOWS:
        yield Mask(left, right)


def test_visible_is_the_definition():
    for (T, S), mask in itertools.product(SHAPES, _masks()):
        vis = mask.visible_matrix(T, S)
        for i, j in itertools.product(range(T), range(S)):
            lo = -np.inf if mask.left is None else i + S - T - mask.left
            hi = np.inf if mask.right is None else i + S - T + mask.right
            assert vis[i, j] == (lo <= j <= hi), (T, S, mask, i, j)


def test_visible_pairs_brute_force():
    for (T, S), mask in itertools.product(SHAPES, _masks()):
        assert mask.visible_pairs(T, S) == int(mask.visible_matrix(T, S).sum()), (T, S, mask)


@pytest.mark.parametrize("block", [1, 4, 16])
def test_ranges_are_exact(block):
    """key_range(i0, i1) is exactly the keys some row of i0..i1-1 sees (and query_range the
    transpose): not one key more (tight) and none fewer (complete)."""
    for (T, S), mask in itertools.product(SHAPES, _masks()):
        vis = mask.visible_matrix(T, S)
        for i0 in range(0, T, block):
            i1 = min(T, i0 + block)
            cols = np.flatnonzero(vis[i0:i1].any(axis=0))
            lo, hi = mask.key_range(i0, i1, T, S)
            if cols.size:
                assert (lo, hi) == (cols[0], cols[-1] + 1), (T, S, mask, i0, i1)
                # contiguous: every key between lo and hi is seen by some row of the tile
                assert cols.size == hi - lo
            else:
                assert hi <= lo, (T, S, mask, i0, i1, lo, hi)
                assert mask.key_end(i0, i1, T, S) <= mask.key_begin(i0, i1, T, S, block)
        for j0 in range(0, S, block):
            j1 = min(S, j0 + block)
            rows = np.flatnonzero(vis[:, j0:j1].any(axis=1))
            lo, hi = mask.query_range(j0, j1, T, S)
            if rows.size:
                assert (lo, hi) == (rows[0], rows[-1] + 1), (T, S, mask, j0, j1)
            else:
                assert hi <= lo, (T, S, mask, j0, j1)


@pytest.mark.parametrize("bm,bn", [(1, 1), (4, 8), (16, 16), (64, 32)])
def test_tiles_cover_exactly_the_visible_tiles(bm, bn):
    """key_tiles / query_tiles visit every tile holding a visible pair, and no tile without one."""
    for (T, S), mask in itertools.product(SHAPES, _masks()):
        vis = mask.visible_matrix(T, S)
        for i0 in range(0, T, bm):
            i1 = min(T, i0 + bm)
            want = [j0 for j0 in range(0, S, bn) if vis[i0:i1, j0:j0 + bn].any()]
            assert list(mask.key_tiles(i0, i1, T, S, bn)) == want, (T, S, mask, i0)
        for j0 in range(0, S, bn):
            j1 = min(S, j0 + bn)
            want = [i0 for i0 in range(0, T, bm) if vis[i0:i0 + bm, j0:j1].any()]
            assert list(mask.query_tiles(j0, j1, T, S, bm)) == want, (T, S, mask, j0)


@pytest.mark.parametrize("bm,bn", [(1, 1), (4, 8), (16, 16), (8, 32)])
def test_tile_needs_mask(bm, bn):
    """A tile needs the per-element rule iff one of its pairs is hidden; nominal extents past
    T or S always do (padding rows and keys must be hidden)."""
    for (T, S), mask in itertools.product(SHAPES, _masks()):
        vis = mask.visible_matrix(T, S)
        for i0, j0 in itertools.product(range(0, T, bm), range(0, S, bn)):
            i1, j1 = min(T, i0 + bm), min(S, j0 + bn)
            assert mask.tile_needs_mask(i0, i1, j0, j1, T, S) == (not vis[i0:i1, j0:j1].all())
            if i0 + bm > T or j0 + bn > S:
                assert mask.tile_needs_mask(i0, i0 + bm, j0, j0 + bn, T, S)


def test_make():
    assert Mask.make() == Mask() and Mask.make().dense and Mask().short() == "dense"
    assert Mask.make(causal=True) == Mask(None, 0) and Mask(None, 0).short() == "causal"
    assert Mask.make(window=(-1, -1)) == Mask()
    assert Mask.make(window=(4, None)) == Mask(4, None)
    assert Mask.make(causal=True, window=(4, 9)) == Mask(4, 0)   # intersection
    assert Mask.make(causal=True, window=(None, -1)) == Mask(None, 0)
    assert Mask(4, 0).short() == "window_4_0" and Mask(None, 3).short() == "window_inf_3"
    assert hash(Mask(4, 0)) == hash(Mask.make(window=(4, 0)))


@pytest.mark.parametrize("window,exc,match", [
    ((-2, 0), ValueError, r"window\[0\] \(left\)=-2"),
    ((0, -5), ValueError, r"window\[1\] \(right\)=-5"),
    ((1.5, 0), TypeError, r"window\[0\] \(left\)=1.5"),
    ((True, 0), TypeError, r"window\[0\] \(left\)=True"),
    ((0, "3"), TypeError, r"window\[1\] \(right\)='3'"),
    ((1, 2, 3), TypeError, r"window=\(1, 2, 3\) must be a pair"),
    (5, TypeError, r"window=5 must be a pair"),
    ("ab", TypeError, r"window='ab' must be a pair"),
    ({1: 2, 3: 4}, TypeError, r"window=\{1: 2, 3: 4\} must be a pair"),
])
def test_bad_window(window, exc, match):
    with pytest.raises(exc, match=match):
        Mask.make(window=window)


@pytest.mark.parametrize("window,open_", [((0, 2 ** 63 - 1), (0, None)), ((2 ** 70, 3), (None, 3)),
                                          ((np.uint64(2 ** 63), 0), (None, 0)),
                                          ((1 << 30, 1 << 30), (None, None))])
def test_a_bound_past_any_sequence_is_open(window, open_):
    """UNBOUNDED (2^30) keys or more: the open side (the kernels' kUnbounded), so that the twin
    and the oracle's int64 index arithmetic cannot wrap (i + S - T + 2^63 - 1 did: every query
    but the first saw no key); one below stays a bound."""
    assert Mask.make(window=window) == Mask.make(window=open_)
    assert Mask.make(window=(UNBOUNDED - 1, 0)) == Mask(UNBOUNDED - 1, 0)
    T, S = 5, 7
    assert (Mask.make(window=window).visible_matrix(T, S)
            == Mask.make(window=open_).visible_matrix(T, S)).all()


def test_bad_causal():
    with pytest.raises(TypeError, match="causal must be a bool, got 1"):
        Mask.make(causal=1)
