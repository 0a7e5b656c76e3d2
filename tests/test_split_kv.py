"""Split-KV (flash-decoding): the key tiles of each query tile shared out over num_splits blocks,
each leaving its own output and lse in float, merged through their log-sum-exp
(kernels_cu/split_combine.cuh; the twin runs the same splits and merge). Few queries over many
keys, every dtype and kernel family, masks and score modifiers, GQA, against the float64 oracle;
the split rule; argument errors."""
import numpy as np
import pytest

import cuflash
from cuflash import TileConfig
from cuflash._xp import to_numpy
from cuflash.mask import split_share
from cuflash.mask_mod import MaskMod
from cuflash.oracle import oracle_attention

from helpers import poison_gpu_outputs  # noqa: F401 (autouse fixture)
from helpers import ALL_DTYPES, assert_matches_oracle, case_seed, make_inputs


def test_split_share_rule():
    """ceil(n / splits) tiles per split, in order, every tile once; later splits may be empty."""
    for n in range(0, 40):
        for splits in range(1, 12):
            parts = [list(split_share(n, s, splits)) for s in range(splits)]
            assert sum(parts, []) == list(range(n))
            per = -(-n // splits)
            assert all(len(p) <= per for p in parts)
            assert [len(p) for p in parts] == sorted((len(p) for p in parts), reverse=True)
    assert [list(split_share(10, s, 3)) for s in range(3)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [list(split_share(2, s, 4)) for s in range(4)] == [[0], [1], [], []]


def _cases(xp):
    slopes = xp.asarray(np.array([0.5, 0.25, 0.125, 0.0625], dtype=np.float32))
    return {
        "dense": dict(),
        "causal": dict(causal=True),
        "window_softcap_alibi": dict(causal=True, window=(300, None), softcap=3.0,
                                     alibi_slopes=slopes),
        "mask_mod": dict(mask_mod=MaskMod("(j % 3 != 1) | (j > i + 500)")),
    }


def _tiles(xp, dtype):
    """(tile, family) pairs: the default, and on the GPU the mma kernel for 16-bit dtypes."""
    out = [None]
    if xp is not np and np.dtype(dtype).itemsize == 2:
        out.append(TileConfig(64, 32, 4, 2, "mma"))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dense", "causal", "window_softcap_alibi", "mask_mod"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_split_kv_matches_oracle(xp, dtype, name):
    """T = 1, 5 and 40 queries over S = 777 keys (a ragged last key tile), 4 heads, num_splits
    2, 3, 7, 64 (more splits than key tiles: empty splits weigh 0) and automatic: out and lse
    against the oracle, and close to the unsplit kernel's."""
    kw = _cases(xp)[name]
    for T in (1, 5, 40):
        q, k, v = make_inputs(xp, (1, 4, T, 64), (1, 4, 777, 64), dtype,
                              seed=case_seed("split", name, T))
        ref_out, ref_lse = oracle_attention(q, k, v, **kw)
        naive_out, naive_lse = cuflash.naive_attention(q, k, v, return_lse=True, **kw)
        for tile in _tiles(xp, dtype):
            one_out, one_lse = cuflash.attention(q, k, v, tile=tile, return_lse=True, **kw)
            for splits in (2, 3, 7, 64, None):
                out, lse = cuflash.attention(q, k, v, tile=tile, return_lse=True,
                                             num_splits=splits, **kw)
                where = f"{name} T={T} splits={splits} tile={tile}"
                assert_matches_oracle(out, ref_out, naive_out, dtype=dtype, name=f"out {where}")
                assert_matches_oracle(lse, ref_lse, naive_lse, dtype=dtype, name=f"lse {where}")
                # the same rows see the same keys: -inf where the unsplit lse has it
                np.testing.assert_array_equal(np.isinf(to_numpy(lse)),
                                              np.isinf(to_numpy(one_lse)))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_split_kv_gqa_and_rows_without_keys(xp, dtype):
    # (the fast tier's split-KV case: every dtype's default family, the merge, empty splits)
    """GQA (8 query heads over 2 kv heads), causal with T > S: the first T - S queries see no
    key in any split (out 0, lse -inf after the merge)."""
    q, k, v = make_inputs(xp, (2, 8, 9, 32), (2, 2, 5, 32), dtype, seed=case_seed("split-gqa"))
    ref_out, ref_lse = oracle_attention(q, k, v, causal=True)
    naive_out, naive_lse = cuflash.naive_attention(q, k, v, causal=True, return_lse=True)
    out, lse = cuflash.attention(q, k, v, causal=True, return_lse=True, num_splits=3)
    assert_matches_oracle(out, ref_out, naive_out, dtype=dtype, name="out gqa")
    assert_matches_oracle(lse, ref_lse, naive_lse, dtype=dtype, name="lse gqa")
    assert np.isneginf(to_numpy(lse)[:, :, :4]).all() and (to_numpy(out)[:, :, :4] == 0).all()


@pytest.mark.parametrize("d", [64, 256])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_split_kv_many_splits(xp, dtype, d):
    """The merge at num_splits = MAX_SPLITS (256) and 201, every split holding keys (S = 256 key
    tiles of 128 and a ragged 37): the merging warps stage a row's partials in batches of splits
    (kernels_cu/split_combine.cuh), so every batch, the last partial one and, at d = 256, each
    group of 32 column chunks must weigh in; d = 64 leaves half the lanes without a chunk."""
    from cuflash.checks import MAX_SPLITS
    assert MAX_SPLITS == 256
    q, k, v = make_inputs(xp, (1, 2, 3, d), (1, 2, 256 * 128 + 37, d), dtype,
                          seed=case_seed("many-splits", d))
    ref_out, ref_lse = oracle_attention(q, k, v, causal=True)
    naive_out, naive_lse = cuflash.naive_attention(q, k, v, causal=True, return_lse=True)
    for splits in (MAX_SPLITS, 201):
        out, lse = cuflash.attention(q, k, v, causal=True, return_lse=True, num_splits=splits)
        assert_matches_oracle(out, ref_out, naive_out, dtype=dtype, name=f"out splits={splits}")
        assert_matches_oracle(lse, ref_lse, naive_lse, dtype=dtype, name=f"lse splits={splits}")


def test_merge_split_cap():
    """The splits a kernel's merge holds (ops.merge_split_cap, split_combine.cuh): per warp one
    weight per split and 1024 bytes of staged chunks in its share of the shared memory, 1024
    bytes of which may go to alignment."""
    from types import SimpleNamespace
    from cuflash.gpu import ops
    spec = lambda smem, warps: SimpleNamespace(smem_bytes=lambda: smem, threads=lambda: 32 * warps)
    assert ops.merge_split_cap(spec(5248, 4), 4) == 8      # (5248 - 1024) / 4 = 1056 -> 32 bytes
    assert ops.merge_split_cap(spec(5248, 4), 8) == 4
    assert ops.merge_split_cap(spec(4096, 4), 4) == 0      # not even one weight: no split
    assert ops.merge_split_cap(spec(100_000, 4), 4) == (24_736 - 1024) // 4
    assert ops.merge_split_cap(spec(1024 + 8 * 2048, 8), 8) == 128


def test_merge_room_holds_every_split_in_one_round():
    """ops.merge_room_bytes against split_combine.cuh's finish_split (room = scratch / busy & ~15;
    fit = (room - weights) / 512 splits; one round where fit >= splits): the bytes it asks for
    hold every split in one round even with 1023 of them lost to the layout's alignment, and
    no more than that."""
    from cuflash.gpu import ops
    for splits in (2, 3, 17, 64, 128):
        for rows, warps in ((1, 4), (3, 4), (4, 4), (16, 4), (2, 8), (0, 4)):
            for acc in (4, 8):
                nbytes = ops.merge_room_bytes(splits, rows, warps, acc)
                busy = max(1, min(rows, warps))
                weights = (splits * acc + 15) & ~15
                room = (nbytes - 1023) // busy & ~15
                assert (room - weights) // ops.MERGE_BYTES_PER_SPLIT >= splits, (splits, rows)
                assert nbytes == busy * (weights + splits * 512) + 1024, (splits, rows)
    # one row on four warps: one warp's share; four rows: four
    assert ops.merge_room_bytes(64, 1, 4, 4) == 256 + 64 * 512 + 1024
    assert ops.merge_room_bytes(64, 4, 4, 4) == 4 * (256 + 64 * 512) + 1024


@pytest.mark.gpu
def test_split_merge_room_of_small_tiles():
    """A 32 × 16 CUDA-core tile of 8 warps at d = 16 (run as the d = 32 kernel) holds the merge
    of 88 float32 splits in its shared memory: automatic splits (128 wanted) are capped to what it
    holds and match the oracle; forced ones beyond it are refused with the argument named, before
    any launch. The cap is taken from the spec the launch builds (plan.specs_for pads d)."""
    import cupy as cp
    from cuflash.gpu import ops, plan
    from cuflash.gpu.plan import Variant
    tile = TileConfig(32, 16, 8, 1)
    cap = ops.merge_split_cap(plan.specs_for("float32", 16, tile,
                                             Variant(mask="causal", split=True), False)[0], 4)
    assert 1 < cap < 128
    q, k, v = make_inputs(np, (1, 2, 1, 16), (1, 2, 4096 + 5, 16), np.float32,
                          seed=case_seed("merge-room"))
    ref_out, ref_lse = oracle_attention(q, k, v, causal=True)
    naive_out, naive_lse = cuflash.naive_attention(q, k, v, causal=True, return_lse=True)
    qc, kc, vc = (cp.asarray(x) for x in (q, k, v))
    for splits in (None, cap):
        out, lse = cuflash.attention(qc, kc, vc, causal=True, tile=tile, return_lse=True,
                                     num_splits=splits)
        assert_matches_oracle(out, ref_out, naive_out, dtype=np.float32, name=f"out {splits}")
        assert_matches_oracle(lse, ref_lse, naive_lse, dtype=np.float32, name=f"lse {splits}")
    with pytest.raises(ValueError, match=rf"num_splits={cap + 1}: .* at most {cap} splits"):
        cuflash.attention(qc, kc, vc, causal=True, tile=tile, num_splits=cap + 1)


def test_split_kv_twin_equals_unsplit():
    """On the twin a split changes only the order of float32 sums: within a few units of the
    float32 roundoff of the unsplit result, in out and lse."""
    q, k, v = make_inputs(np, (3, 17, 16), (3, 300, 16), np.float32, seed=5)
    a_out, a_lse = cuflash.attention(q, k, v, causal=True, return_lse=True,
                                     tile=TileConfig(16, 16))
    for splits in (2, 5, 40):
        b_out, b_lse = cuflash.attention(q, k, v, causal=True, return_lse=True,
                                         tile=TileConfig(16, 16), num_splits=splits)
        np.testing.assert_allclose(b_out, a_out, rtol=0, atol=1e-6)
        np.testing.assert_allclose(b_lse, a_lse, rtol=1e-6)


@pytest.mark.parametrize("bad,err", [(0, ValueError), (-2, ValueError), (257, ValueError),
                                     (1.5, TypeError),
                                     (True, TypeError), ("2", TypeError)])
def test_num_splits_errors(bad, err):
    q, k, v = make_inputs(np, (1, 4, 8), (1, 4, 8), np.float32, seed=1)
    with pytest.raises(err, match="num_splits"):
        cuflash.attention(q, k, v, num_splits=bad)


@pytest.mark.gpu
def test_automatic_splits_rule(monkeypatch):
    """num_splits=None: one split while the query tiles fill the GPU, more when they leave it
    idle (at least two key tiles each, at most 128)."""
    from cuflash.gpu import ops
    monkeypatch.setattr(ops, "sm_count", lambda dev=None: 100)
    assert ops.num_splits_for(100, 2, 1000, 0) == 1          # 200 blocks fill 100 SMs twice
    assert ops.num_splits_for(1, 32, 1000, 0) == 7           # 32 blocks: 200 / 32 -> 7
    assert ops.num_splits_for(1, 1, 1000, 0) == 128          # capped
    assert ops.num_splits_for(1, 1, 10, 0) == 5              # two key tiles per split
    assert ops.num_splits_for(1, 1, 3, 0) == 1               # too few key tiles to split


def test_decode_split_rule():
    """kvcache._decode_split (NOTES v27, v28, v96): up to DECODE_FILL = 1 block per SM, at least
    two key tiles per split, at most DECODE_MAX_SPLITS = 64, no split past that; 3 stages where
    the grid is at most one block per SM or more than two, 2 between (pure arithmetic on a
    132-SM device: no GPU needed)."""
    from cuflash.kvcache import DECODE_FILL, _decode_split
    assert DECODE_FILL == 1
    assert _decode_split(1, 2048, 132) == (64, 3)       # one query tile: capped at 64 splits
    assert _decode_split(2, 2048, 132) == (64, 3)       # 132 // 2 = 66: capped
    assert _decode_split(3, 2048, 132) == (44, 3)
    assert _decode_split(1, 2048, 132, max_splits=128) == (128, 3)
    assert _decode_split(1, 16, 132) == (8, 3)          # two key tiles per split
    assert _decode_split(8, 2048, 132) == (16, 3)       # 132 // 8 = 16: 128 blocks
    assert _decode_split(8, 20, 132) == (10, 3)         # 20 key tiles: 10 splits
    assert _decode_split(64, 2048, 132) == (2, 3)       # 132 // 64 = 2
    assert _decode_split(100, 2048, 132) == (1, 3)      # 132 // 100 = 1: unsplit, alone per SM
    assert _decode_split(132, 2048, 132) == (1, 3)      # exactly one per SM
    assert _decode_split(133, 2048, 132) == (1, 2)      # past one per SM: unsplit, 2 stages
    assert _decode_split(264, 2048, 132) == (1, 2)      # exactly 2 per SM
    assert _decode_split(265, 2048, 132) == (1, 3)      # over 2 per SM: 3 stages
    assert _decode_split(512, 16, 132) == (1, 3)
    assert _decode_split(1, 3, 132) == (1, 3)           # too few key tiles to split
    assert _decode_split(0, 16, 132) == (8, 3)          # an empty batch launches nothing anyway
    # fill = 2, v27's rule: 2 stages where its grid is between one and two blocks per SM
    assert _decode_split(8, 2048, 132, fill=2) == (33, 2)
    assert _decode_split(64, 2048, 132, fill=2) == (4, 2)
    assert _decode_split(66, 2048, 132, fill=2) == (4, 2)
    assert _decode_split(256, 2048, 132, fill=2) == (1, 2)
    assert _decode_split(8, 2048, 132, fill=2, max_splits=8) == (8, 3)


@pytest.mark.gpu
@pytest.mark.parametrize("B,Hkv,S", [(1, 1, 8192), (1, 8, 8192), (8, 8, 1024), (40, 8, 1024)])
def test_decode_step_takes_the_rule(B, Hkv, S):
    """A decode step's prepared launch has _decode_split's splits and ring depth for its grid
    (B·Hkv query tiles of 16 rows: GQA 4 folded, one query), and its result the oracle's."""
    import cupy as cp
    from cuflash import kvcache
    from cuflash.gpu import ops
    rng = np.random.default_rng(B * 1000 + Hkv + S)
    q = rng.standard_normal((B, 4 * Hkv, 1, 64)).astype(np.float16)
    k, v = (rng.standard_normal((B, Hkv, S, 64)).astype(np.float16) for _ in "kv")
    lens = rng.integers(S // 2, S + 1, B).astype(np.int32)
    kvcache._PLANS.clear()
    out = kvcache.attention_with_kvcache(*(cp.asarray(x) for x in (q, k, v)),
                                         cache_seqlens=cp.asarray(lens))
    (plan,) = [p for p in kvcache._PLANS.values() if p is not kvcache._NO_PLAN]
    splits, stages = kvcache._decode_split(B * Hkv, -(-S // 64), ops.sm_count())
    assert (plan.launch.num_splits, plan.launch.spec.tile.num_stages) == (splits, stages)
    for b in range(B):
        kb, vb = (np.repeat(a[b][:, :lens[b]], 4, axis=0) for a in (k, v))
        ref = oracle_attention(q[b], kb, vb)[0]
        naive = cuflash.naive_attention(q[b], kb, vb)
        assert_matches_oracle(out[b], ref, naive, dtype="float16", name=f"out b {b}")
