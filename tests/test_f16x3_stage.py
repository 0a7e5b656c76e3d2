"""The float16-product kernels' operands split once per call (cuflash/gpu/f16x3_stage.py,
kernels_cu/f16x3_stage.cuh): the rule in NumPy against its definition, with lo parts ('highest')
and without ('tf32'), and the GPU's staging kernel against the rule bit for bit (gpu-marked). The forward that reads the staged rows is
tested against the float64 oracle in test_wgmma_f16x3.py."""
import numpy as np
import pytest

from cuflash.gpu import f16x3_stage
from cuflash.gpu.tf32_stage import padded_keys

from helpers import poison_gpu_outputs  # noqa: F401 (autouse fixture)

F32 = np.float32


def _parts(rows, dp):
    """(hi, lo, inverse, pad) of staged rows (..., dp + 4) as float64 / float32 arrays"""
    halves = rows.view(np.float16)
    return (halves[..., :dp].astype(np.float64), halves[..., dp:2 * dp].astype(np.float64),
            rows[..., dp], rows[..., dp + 1:])


@pytest.mark.parametrize("S,block_n,d,dp", [(37, 64, 64, 64), (64, 32, 128, 128),
                                            (1, 64, 96, 128), (130, 32, 33, 64)])
def test_staged_rows(S, block_n, d, dp):
    """hi + lo is each row times its scale to float32's precision, hi and lo float16 with the
    row's (K) or its key tile's (V) largest |x| scaled into [2^13, 2^14); the inverse undoes the
    scale (and V's P factor 2^14); zeros past d and S; the rows' last floats zero."""
    rng = np.random.default_rng(S + d)
    B, H = 2, 3
    k = (rng.standard_normal((B, H, S, d)) * np.exp(rng.uniform(-20, 20, (B, H, S, 1)))).astype(F32)
    v = (rng.standard_normal((B, H, S, d)) * 3e-3).astype(F32)
    ks, vs = f16x3_stage.staged(k, v, block_n, dp)
    S_pad = padded_keys(S, block_n)
    assert ks.shape == vs.shape == (B, H, S_pad, dp + f16x3_stage.ROW_PAD)
    assert ks.dtype == vs.dtype == F32 and ks.flags.c_contiguous and vs.flags.c_contiguous
    for x, st, is_v in ((k, ks, False), (v, vs, True)):
        hi, lo, inv, pad = _parts(st, dp)
        assert not pad.any() and not hi[..., d:].any() and not lo[..., d:].any()
        assert not hi[:, :, S:].any() and not lo[:, :, S:].any()
        undo = inv.astype(np.float64) * (f16x3_stage.P_SCALE if is_v else 1)
        got = (hi + lo) * undo[..., None]
        want = x.astype(np.float64)
        err = np.abs(got[:, :, :S, :d] - want)
        # 22 significant bits of each element, relative to its block's largest |x|
        blk = np.abs(want).max(axis=-1, keepdims=True).astype(np.float64)
        if is_v:
            t = np.abs(np.pad(want, ((0, 0), (0, 0), (0, S_pad - S), (0, 0)))).reshape(
                B, H, S_pad // block_n, -1).max(axis=-1)
            blk = np.repeat(t, block_n, axis=-1)[:, :, :S, None]
            per_tile = inv.reshape(B, H, S_pad // block_n, block_n)
            assert (per_tile == per_tile[..., :1]).all()
        assert (err <= 2.0 ** -21 * np.maximum(np.abs(want), 2.0 ** -12 * blk)).all()
        m = blk[..., 0] / undo[:, :, :S]                  # the block's largest |x| · scale
        assert ((m >= 2 ** 13) & (m < 2 ** 14)).all()
        assert (np.abs(hi[:, :, :S]) <= 2 ** 14).all()    # (hi may round the max up to 2^14)
        assert np.all(np.log2(undo) == np.round(np.log2(undo)))   # powers of two
    assert (ks[:, :, S:, dp] == 1).all()   # rows past S: K's scale 1


def test_range_scale_edges():
    """f16_range_scale: zero and non-finite maxima 1; float32's smallest and largest numbers
    stay within float32's exponents; otherwise max · scale in [2^13, 2^14)."""
    rs = f16x3_stage.range_scale
    assert rs(np.float32(0)) == 1 and rs(np.float32(np.inf)) == 1 and rs(np.float32(np.nan)) == 1
    assert rs(np.float32(1e-45)) == 2.0 ** 127 and rs(np.float32(3e38)) == 2.0 ** -114
    m = np.exp(np.random.default_rng(0).uniform(-70, 70, 1000)).astype(F32)
    s = rs(m)
    assert ((m * s >= 2 ** 13) & (m * s < 2 ** 14)).all()
    assert rs(np.float32(2 ** 13)) == 1 and rs(np.float32(2 ** 14)) == 0.5


def test_staged_checks():
    k = np.zeros((1, 1, 8, 64), F32)
    with pytest.raises(ValueError, match="block_n=24 must be a multiple of 16"):
        f16x3_stage.staged(k, k, 24, 64)
    with pytest.raises(ValueError, match="no smaller than d=64"):
        f16x3_stage.staged(k, k, 32, 0)
    with pytest.raises(ValueError, match="must have one shape"):
        f16x3_stage.staged(k, np.zeros((1, 1, 9, 64), F32), 32, 64)


@pytest.mark.parametrize("v_tile", [True, False])
def test_rows_without_lo_parts(v_tile):
    """lo=False ('tf32'): rows of dp / 2 + 4 floats holding the lo=True rows' hi halves, then
    the same inverse and three zeros."""
    rng = np.random.default_rng(11)
    k = (rng.standard_normal((2, 1, 45, 40)) * np.exp(rng.uniform(-9, 9, (2, 1, 45, 1)))).astype(F32)
    v = rng.standard_normal((2, 1, 45, 40)).astype(F32)
    full = f16x3_stage.staged(k, v, 32, 64, v_tile, pad=64)
    his = f16x3_stage.staged(k, v, 32, 64, v_tile, pad=64, lo=False)
    assert f16x3_stage.row_floats(64, False) == 36 and f16x3_stage.row_floats(128, False) == 68
    assert not f16x3_stage.carries_lo("wgmma_f16x1") and f16x3_stage.carries_lo("wgmma_f16x3")
    for f, h in zip(full, his):
        assert h.shape == (2, 1, 64, 36) and h.flags.c_contiguous
        np.testing.assert_array_equal(h[..., :32].view(np.uint32), f[..., :32].view(np.uint32))
        np.testing.assert_array_equal(h[..., 32], f[..., 64])      # the inverse
        assert not h[..., 33:].any()


def test_staged_rows_per_row():
    """v_tile=False (the backward's pairs): both arrays scaled row by row as K, padded to `pad`."""
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((1, 2, 70, 64)) * np.exp(rng.uniform(-9, 9, (1, 2, 70, 1)))).astype(F32)
    sa, sb = f16x3_stage.staged(a, a[:, ::-1], 64, 64, v_tile=False, pad=128)
    assert sa.shape == sb.shape == (1, 2, 128, 68)
    ka, _ = f16x3_stage.staged(a, a, 64, 64, pad=128)
    np.testing.assert_array_equal(sa.view(np.uint32), ka.view(np.uint32))
    np.testing.assert_array_equal(sb.view(np.uint32), ka[:, ::-1].view(np.uint32))
    with pytest.raises(ValueError, match="pad=96 a multiple of block_n"):
        f16x3_stage.staged(a, a, 64, 64, pad=96)


@pytest.mark.gpu
@pytest.mark.parametrize("lo", [True, False], ids=["lo", "hi_only"])
@pytest.mark.parametrize("S,block_n,d,b_tile", [(37, 64, 64, True), (300, 32, 128, True),
                                                (1, 64, 96, True), (129, 32, 33, True),
                                                (37, 64, 64, False), (200, 64, 17, False),
                                                (130, 64, 100, False)])
def test_staging_kernel_matches_the_rule(cp, S, block_n, d, b_tile, lo):
    """kernels_cu/f16x3_stage.cuh gives f16x3_stage.staged's rows bit for bit (NaN-poisoned
    outputs: every element written), from k and v with strided (broadcast) rows: the forward's
    (v per key tile) and the backward's (per row, padded to 128 rows), with lo parts and
    without."""
    from cuflash.gpu import ops, plan
    dp = plan.head_dim_pad(d, "wgmma_f16x3")
    rng = np.random.default_rng(S)
    k = cp.asarray((rng.standard_normal((2, 3, S, d)) * 40).astype(F32))
    v = cp.broadcast_to(cp.asarray(rng.standard_normal((1, 3, S, d)).astype(F32)), (2, 3, S, d))
    pad = None if b_tile else 128
    if b_tile:
        got = f16x3_stage.staged_run(ops._Run(k, k, v, 2, 3, 1, S, S), block_n, dp, lo=lo)
        got_k, got_v = got.k, got.v
    else:
        got_k, got_v = f16x3_stage.stage_pair(k, v, block_n, dp, b_tile=False, pad=pad, lo=lo)
    want_k, want_v = f16x3_stage.staged(cp.asnumpy(k), cp.asnumpy(v), block_n, dp, b_tile, pad,
                                        lo)
    np.testing.assert_array_equal(cp.asnumpy(got_k).view(np.uint32), want_k.view(np.uint32))
    np.testing.assert_array_equal(cp.asnumpy(got_v).view(np.uint32), want_v.view(np.uint32))


def test_staging_kernels_compile_without_spills():
    """Every staging kernel (the float16 products' and the TF32 forward's) compiles with NVRTC
    for sm_90 without local memory: their loads are held in registers before the stores (NOTES
    v58), so a spill would put them back in memory."""
    from cuflash.gpu import build
    made = [(build.f16x3_stage_source(*k), build.f16x3_stage_name(*k))
            for k in build.f16x3_stage_kernels()]
    made += [(build.tf32_stage_source(d), build.tf32_stage_name(d))
             for d in build.TF32_STAGE_DIMS]
    assert len(made) == 17   # 5 forward shapes and 2 row dims, each with lo or without; 3 TF32
    assert [build.tf32_stage_dim(d) for d in (1, 64, 65, 128, 129, 256)] == [64, 64, 128, 128,
                                                                            256, 256]
    for src, name in made:
        r = build.compile_offline(src, name, "sm_90")
        assert r.spill_stores == r.spill_loads == r.stack_bytes == 0, (name, r.log[-400:])
