"""The mma forward's key-split layout (flash_fwd_mma.cu v10): with block_m = 16 or 32 and more
warps than 16-row m-tiles, every warp takes all rows and its own block_n / num_warps keys of each
tile, and the warps' results merge at the end (epilogue.cuh, KeyWarpMerge). Checked against the
float64 oracle through cuflash.attention (prefill shapes: partial tiles, masks, score modifiers,
split-KV) and through attention_with_kvcache (decode steps over contiguous and paged caches).
The plan's validation of these tiles runs without a GPU.
"""
import numpy as np
import pytest

import cuflash
from cuflash import TileConfig, kvcache
from cuflash.gpu import plan
from cuflash.oracle import oracle_attention
from helpers import (  # poison_gpu_outputs: autouse fixture
    poison_gpu_outputs, DTYPES, assert_matches_oracle, case_seed, make_inputs)

KEY_SPLIT_TILES = [TileConfig(16, 64, 4, 2, "mma"), TileConfig(32, 64, 4, 2, "mma"),
                   TileConfig(16, 128, 4, 2, "mma"), TileConfig(16, 32, 2, 1, "mma")]


def _gpu():
    from cuflash._xp import gpu_available
    if not gpu_available():
        pytest.skip("no CUDA GPU visible to CuPy")
    import cupy as cp
    return cp


def test_plan_accepts_key_split_tiles_and_names_the_rule():
    """block_m 16 or 32 with more warps than m-tiles is the key split; block_n must then give
    every warp a multiple of 16 keys; other tiles with too many warps for their rows are still
    refused with the row rule."""
    for tile in KEY_SPLIT_TILES:
        plan.validate(plan.specs_for("float16", 128, tile, False, False)[0], 232448, "sm_90")
    bad = TileConfig(16, 32, 4, 2, "mma")
    with pytest.raises(ValueError, match=r"warps split the keys: block_n must be a multiple of "
                                         r"16·num_warps = 64"):
        plan.validate(plan.specs_for("float16", 128, bad, False, False)[0], 232448, "sm_90")
    with pytest.raises(ValueError, match="block_m must be 16 or 32 rows per warp"):
        plan.validate(plan.specs_for("float16", 128, TileConfig(64, 64, 8, 2, "mma"), False,
                                     False)[0], 232448, "sm_90")


CASES = [  # (id, T, S, d, options)
    ("dense", 37, 301, 64, dict(causal=False)),
    ("causal", 50, 200, 128, dict(causal=True)),
    ("window-softcap", 33, 257, 96, dict(causal=True, window=(70, 5), softcap=3.0)),
    ("decode-like", 4, 1000, 128, dict(causal=True)),
]


TILE_DTYPES = [(t, "float16") for t in KEY_SPLIT_TILES] + [(KEY_SPLIT_TILES[0], "bfloat16")]


@pytest.mark.gpu
@pytest.mark.parametrize("tile,dtype", TILE_DTYPES, ids=[f"{t.short()}-{d}" for t, d in TILE_DTYPES])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("num_splits", [1, 3])
def test_key_split_forward_matches_oracle(tile, case, dtype, num_splits):
    cp = _gpu()
    if DTYPES[dtype] is None:
        pytest.skip("ml_dtypes not installed (no bfloat16)")
    name, T, S, d, options = case
    q, k, v = make_inputs(cp, (2, 3, T, d), (2, 3, S, d), DTYPES[dtype],
                          case_seed("keysplit", tile.short(), name, dtype, num_splits))
    out, lse = cuflash.attention(q, k, v, tile=tile, num_splits=num_splits, return_lse=True,
                                 **options)
    ref_out, ref_lse = oracle_attention(q, k, v, **options)
    n_out, n_lse = cuflash.naive_attention(q, k, v, return_lse=True, **options)
    where = f"{tile.short()} {name} splits={num_splits}"
    assert_matches_oracle(out, ref_out, n_out, dtype=DTYPES[dtype], name=f"out {where}")
    assert_matches_oracle(lse, ref_lse, n_lse, dtype=DTYPES[dtype], name=f"lse {where}")


@pytest.mark.gpu
@pytest.mark.parametrize("tile", KEY_SPLIT_TILES[:3], ids=lambda t: t.short())
@pytest.mark.parametrize("layout,page", [("contiguous", 16), ("paged", 128)])
def test_key_split_decode_matches_oracle(monkeypatch, tile, layout, page):
    """Decode steps (GQA fold and one head per row) with the key-split tile forced."""
    cp = _gpu()
    from test_kvcache import Scenario
    monkeypatch.setattr(kvcache, "DECODE_TILE", tile)
    for Hq, Hkv, Tq, opts in ((8, 2, 1, dict(causal=True)), (4, 2, 3, dict(causal=True,
                                                                       window=(90, None)))):
        sc = Scenario(cp, DTYPES["float16"], layout, Hq=Hq, Hkv=Hkv, Tq=Tq, Tnew=1, d=128,
                      page_size=page, seqlens=(0, 1, 129, 700, 17),
                      seed=case_seed("keysplit-decode", tile.short(), layout, Tq))
        out, lse = sc.call(return_lse=True, validate=False, **opts)
        sc.check(out, lse, f"{tile.short()} {layout} Tq={Tq}", **opts)
