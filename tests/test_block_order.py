"""The order thread blocks start in (kernels_cu/block.cuh, GridTile; cuflash/tile.py,
section_rows and section_of): tile-major within sections of grid rows. The order must be a
permutation of the grid: every (tile, row) exactly once, or outputs stay NaN (helpers'
poison) or gradients miss a tile. The GPU tests force small sections (ops._SCHED_ROWS) so that
the uneven sections, the GQA ranks and split-KV all meet the mapping; the CPU tests check the
rule and a mirror of the mapping's arithmetic."""
import itertools

import numpy as np
import pytest

import cuflash
from cuflash.tile import section_of, section_rows

from helpers import poison_gpu_outputs  # noqa: F401 (autouse fixture)
from helpers import ALL_DTYPES, case_seed, randn
from issue12_helpers import check_dense, check_varlen


def grid_order(rows, groups, l2_rows, wave, nx):
    """(x, row) of each linear launch index, as GridTile computes them."""
    section = section_of(rows, nx, l2_rows, wave)
    out = []
    for L in range(rows * nx * groups):
        g, r = divmod(L, rows * nx)
        first = (r // (section * nx)) * section
        n = min(section, rows - first)
        at = r - first * nx
        out.append((at // n, g * rows + first + at % n))
    return out


@pytest.mark.parametrize("rows,groups,l2_rows,wave,nx", [
    (1, 1, 1, 132, 1), (7, 1, 3, 132, 5), (14, 2, 4, 132, 3), (64, 1, 11, 132, 32),
    (5, 3, 100, 264, 4), (9, 1, 1, 132, 7), (16, 1, 23, 132, 128), (33, 1, 50, 132, 20)])
def test_grid_order_is_a_permutation_heaviest_first(rows, groups, l2_rows, wave, nx):
    order = grid_order(rows, groups, l2_rows, wave, nx)
    assert sorted(order) == sorted(itertools.product(range(nx), range(rows * groups)))
    # within a group (rank), a section's rows get tile x before any of them gets x + 1, and
    # every row of an earlier section comes before a later section's
    for g in range(groups):
        part = order[g * rows * nx:(g + 1) * rows * nx]
        assert all(row // rows == g for _, row in part)
        seen_rows = []
        for x, row in part:
            if row not in seen_rows:
                seen_rows.append(row)
        assert seen_rows == sorted(seen_rows)


def test_section_rule():
    l2 = 50 * 10**6
    assert section_rows(2 * 2048 * 128 * 2, l2) == 23       # 1 MB per row, 25 MB budget
    assert section_rows(10**9, l2) == 1                     # a row larger than the L2
    assert section_rows(0, l2) == l2 // 2
    # about one wave of blocks per section (132 resident blocks)
    assert section_of(64, 16, 23, 132) == 8                 # 8 rows of 16 tiles
    assert section_of(16, 128, 23, 132) == 1                # a row is a wave: each row in turn
    assert section_of(16, 128, 23, 264) == 2
    assert section_of(64, 2, 23, 132) == 22                 # the L2 bounds: 22, 22, 20
    assert section_of(7, 1, 3, 132) == 3 and section_of(9, 1, 1, 132) == 1
    assert section_of(20, 30, 50, 132) == 4                 # at most 4 rows: 4 x 5 sections
    for rows, l2_rows, tiles in itertools.product(range(1, 40), range(1, 12), (1, 5, 64)):
        sec = section_of(rows, tiles, l2_rows, 132)
        most = max(1, min(l2_rows, 132 // tiles))
        sections = -(-rows // sec)
        assert 1 <= sec <= most and sections == -(-rows // most)
        assert rows - (sections - 1) * sec > 0              # no empty last section


# -- the kernels under forced small sections --------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("sched", [1, 2, 3])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_kernels_under_small_sections(dtype, sched, monkeypatch):
    """Causal MHA with 2·7 rows (sections of 1, 2 (uneven) and 3 rows), GQA G = 3 summed in
    three ranks, and split-KV: every kernel family of the dtype's defaults."""
    from cuflash._xp import cupy_module
    from cuflash.gpu import ops
    monkeypatch.setattr(ops, "_SCHED_ROWS", sched)
    xp = cupy_module()
    seed = case_seed("order", dtype, sched)
    q, k, v, dout = (randn(xp, s, dtype, seed + i) for i, s in
                     enumerate([(2, 7, 150, 64), (2, 7, 130, 64), (2, 7, 130, 64),
                                (2, 7, 150, 64)]))
    check_dense(xp, q, k, v, dout, dtype=dtype, name=f"mha sched={sched}", dets=(True, False),
                causal=True)
    monkeypatch.setattr(ops, "_GROUP_RANKS", 3)
    check_dense(xp, q[:, :6], k[:, :2], v[:, :2], dout[:, :6], dtype=dtype,
                name=f"gqa sched={sched}", dets=(True,), causal=True)
    out = cuflash.attention(q[:, :, :3], k, v, num_splits=4)
    ref = cuflash.attention(q[:, :, :3], k, v, num_splits=1)
    np.testing.assert_allclose(cuflash._xp.to_numpy(out).astype(np.float64),
                               cuflash._xp.to_numpy(ref).astype(np.float64),
                               rtol=0, atol=5e-2 if dtype in ("float16", "bfloat16") else 1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("sched", [1, 2])
def test_varlen_under_small_sections(sched, monkeypatch):
    from cuflash._xp import cupy_module
    from cuflash.gpu import ops
    monkeypatch.setattr(ops, "_SCHED_ROWS", sched)
    xp = cupy_module()
    lens = [1, 77, 300, 5]
    cu = xp.asarray(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32))
    total = int(sum(lens))
    seed = case_seed("order-varlen", sched)
    q, k, v, dout = (randn(xp, (total, 3, 32), "float16", seed + i) for i in range(4))
    check_varlen(xp, q, k, v, cu, cu, dout, dtype="float16", name=f"varlen sched={sched}",
                 causal=True)
