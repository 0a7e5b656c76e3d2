"""The twin's measured device-memory traffic equals the IO model to the byte; and the IO model
itself behaves as FlashAttention's Theorem 2 says (K/V rereads ∝ 1/block_m, naive ∝ T²)."""
import itertools

import numpy as np
import pytest

from cuflash import TileConfig, iomodel, twin
from cuflash.mask import Mask
from cuflash._xp import accum_dtype, dtype_name

from helpers import dtype_param, make_inputs, randn

# (batch, T, S, d): T and S off the tile grid, S < T, S > T, single rows.
SHAPES = [(2, 97, 97, 32), (1, 17, 257, 16), (3, 257, 17, 72), (1, 1, 100, 16), (2, 100, 1, 24),
          (1, 130, 64, 64)]
TILES = [TileConfig(16, 16), TileConfig(64, 32), TileConfig(32, 128), TileConfig(128, 64),
         TileConfig(256, 16)]
DTYPES = [dtype_param("float16"), dtype_param("bfloat16"), dtype_param("float32"),
          dtype_param("float64")]


def _id(shape):
    return "B{}_T{}_S{}_d{}".format(*shape)


#: masks of the byte tests: dense, causal, sliding windows (with and without causal), two-sided
#: and one-sided windows; the IO model counts only the tiles each leaves (cuflash.mask)
MASKS = {"full": False, "causal": True, "sliding5": Mask(5, 0), "win3_7": Mask(3, 7),
         "right2": Mask(None, 2), "left10": Mask(10, None)}


def _mask(causal):
    return causal if isinstance(causal, Mask) else Mask.make(causal=causal)


def _run_forward(B, T, S, d, dtype, causal, tile, seed=300, num_splits=1):
    q, k, v = make_inputs(np, (B, T, d), (B, S, d), dtype, seed)
    counter = twin.ByteCounter()
    out, lse = twin.forward(q, k, v, mask=_mask(causal), scale=0.25, block_m=tile.block_m,
                            block_n=tile.block_n, counter=counter, num_splits=num_splits)
    return (q, k, v, out, lse), counter


@pytest.mark.parametrize("splits", [2, 5])
@pytest.mark.parametrize("causal", [False, True])
def test_split_forward_bytes_equal_model(causal, splits):
    """Split-KV: each split reads its Q tile and spills O_s and lse_s (accumulation dtype) that
    the merge reads back; K and V are read as without splits."""
    B, T, S, d = 2, 37, 150, 24
    tile = TileConfig(16, 32)
    for dtype in (np.float16, np.float64):
        _, plain = _run_forward(B, T, S, d, dtype, causal, tile)
        _, counter = _run_forward(B, T, S, d, dtype, causal, tile, num_splits=splits)
        model = iomodel.flash_forward(B, T, S, d, dtype, causal, tile, num_splits=splits)
        assert (counter.bytes_read, counter.bytes_written) == (model.bytes_read,
                                                               model.bytes_written), dtype
        e, a = np.dtype(dtype).itemsize, accum_dtype(dtype).itemsize
        assert counter.read["q"] == splits * B * T * d * e
        assert counter.read["k"] == plain.read["k"] and counter.read["v"] == plain.read["v"]
        assert counter.written["out_accum"] == counter.read["out_accum"] == splits * B * T * d * a
        assert counter.written["lse_accum"] == splits * B * T * a


@pytest.mark.parametrize("causal", MASKS.values(), ids=MASKS.keys())
@pytest.mark.parametrize("tile", TILES, ids=TileConfig.short)
@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_forward_bytes_equal_model(shape, tile, causal):
    B, T, S, d = shape
    for dtype in (np.float16, np.float32, np.float64):
        _, counter = _run_forward(B, T, S, d, dtype, causal, tile)
        model = iomodel.flash_forward(B, T, S, d, dtype, causal, tile)
        assert (counter.bytes_read, counter.bytes_written) == (model.bytes_read,
                                                               model.bytes_written), dtype
        e, a = np.dtype(dtype).itemsize, accum_dtype(dtype).itemsize
        # Q is read once, O and lse written once: the K/V rereads are the only repeated traffic
        assert counter.read["q"] == B * T * d * e
        assert counter.written == {"out": B * T * d * e, "lse": B * T * a}
        assert counter.read["k"] == counter.read["v"] >= (B * S * d * e if causal is False else 0)


@pytest.mark.parametrize("deterministic", [True, False], ids=["det", "atomic"])
@pytest.mark.parametrize("causal", MASKS.values(), ids=MASKS.keys())
@pytest.mark.parametrize("tile", TILES, ids=TileConfig.short)
@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_backward_bytes_equal_model(shape, tile, causal, deterministic):
    B, T, S, d = shape
    for dtype in (np.float16, np.float64):
        (q, k, v, out, lse), _ = _run_forward(B, T, S, d, dtype, causal, tile)
        dout = randn(np, (B, T, d), dtype, seed=301)
        counter = twin.ByteCounter()
        twin.backward(dout, q, k, v, out, lse, mask=_mask(causal), scale=0.25,
                      block_m=tile.block_m, block_n=tile.block_n, deterministic=deterministic,
                      counter=counter)
        model = iomodel.flash_backward(B, T, S, d, dtype, causal, tile, deterministic)
        assert (counter.bytes_read, counter.bytes_written) == (model.bytes_read,
                                                               model.bytes_written), dtype
        e = np.dtype(dtype).itemsize
        assert counter.written["dk"] == counter.written["dv"] == B * S * d * e
        assert counter.written["dq"] == B * T * d * e
        assert ("dq_accum" in counter.written) != deterministic


@pytest.mark.parametrize("dtype", DTYPES)
def test_bytes_scale_with_dtype(dtype):
    """Same shape and tile: every input/output term scales with the element size."""
    tile = TileConfig(32, 64)
    _, counter = _run_forward(2, 75, 90, 40, dtype, True, tile)
    model = iomodel.flash_forward(2, 75, 90, 40, dtype_name(dtype), True, tile)
    assert counter.bytes_read == model.bytes_read and counter.bytes_written == model.bytes_written
    assert counter.read["q"] == 2 * 75 * 40 * np.dtype(dtype).itemsize


def test_predict_combines_passes():
    tile = TileConfig(64, 64)
    args = (2, 300, 200, 64, "bfloat16", True)
    fwd = iomodel.predict("flash", "forward", *args, tile=tile)
    bwd = iomodel.predict("flash", "backward", *args, tile=tile, deterministic=False)
    both = iomodel.predict("flash", "both", *args, tile=tile, deterministic=False)
    assert both == fwd + bwd
    assert fwd == iomodel.flash_forward(*args, tile)
    assert bwd == iomodel.flash_backward(*args, tile, deterministic=False)
    naive = iomodel.predict("naive", "both", *args)
    assert naive == iomodel.naive_forward(*args) + iomodel.naive_backward(*args)
    with pytest.raises(ValueError, match="method='dense'"):
        iomodel.predict("dense", "forward", *args)
    with pytest.raises(ValueError, match="pass_='sideways'"):
        iomodel.predict("flash", "sideways", *args, tile=tile)
    with pytest.raises(ValueError, match="needs a TileConfig"):
        iomodel.predict("flash", "forward", *args)


# -- the model's scaling --------------------------------------------------------------------------

def _kv_bytes(T, d, block_m, causal=False, block_n=64):
    """Forward bytes beyond the once-only Q read and O/lse writes: the K/V stream."""
    tr = iomodel.flash_forward(1, T, T, d, "float16", causal, TileConfig(block_m, block_n))
    return tr.bytes_read - T * d * 2


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("T", [4096, 4000])
def test_doubling_block_m_halves_kv_traffic(T, causal):
    """Theorem 2: K and V are read once per query tile, ⌈T/block_m⌉ times."""
    for bm in (16, 32, 64, 128):
        ratio = _kv_bytes(T, 64, bm, causal) / _kv_bytes(T, 64, 2 * bm, causal)
        if T % (2 * bm) == 0 and not causal:
            assert ratio == 2
        else:
            assert 1.8 < ratio < 2.2, (bm, ratio)


def test_kv_traffic_is_quadratic_in_T():
    """Fixed tile: K/V bytes ∝ T² (T/block_m tiles, each reading T rows)."""
    a, b = _kv_bytes(2048, 64, 64), _kv_bytes(4096, 64, 64)
    assert b == 4 * a


def test_naive_bytes_quadratic_and_flash_advantage_grows():
    ratios = []
    for T in (256, 1024, 4096, 16384):
        naive = iomodel.naive_forward(1, T, T, 64, "float16", False).bytes_total
        naive2 = iomodel.naive_forward(1, 2 * T, 2 * T, 64, "float16", False).bytes_total
        assert 3.5 < naive2 / naive <= 4
        flash = iomodel.flash_forward(1, T, T, 64, "float16", False,
                                      TileConfig(128, 64)).bytes_total
        ratios.append(naive / flash)
    assert ratios[0] > 1
    assert all(x < y for x, y in zip(ratios, ratios[1:])), ratios


def test_twin_moves_less_than_naive():
    """Measured on the twin: at T = S = 512 the tiled forward moves fewer bytes than the naive
    model (and the backward too)."""
    tile = TileConfig(64, 64)
    (q, k, v, out, lse), counter = _run_forward(1, 512, 512, 64, np.float16, False, tile)
    naive = iomodel.naive_forward(1, 512, 512, 64, "float16", False)
    assert counter.bytes_read + counter.bytes_written < naive.bytes_total / 2
    bcount = twin.ByteCounter()
    twin.backward(out, q, k, v, out, lse, mask=Mask(), scale=0.125, block_m=64, block_n=64,
                  counter=bcount)
    nb = iomodel.naive_backward(1, 512, 512, 64, "float16", False)
    assert bcount.bytes_read + bcount.bytes_written < nb.bytes_total / 2


def test_causal_skips_tiles():
    """Causal T = S reads about half the K/V bytes of the full pass."""
    full, causal = _kv_bytes(4096, 64, 64, False), _kv_bytes(4096, 64, 64, True)
    assert 0.45 < causal / full < 0.55


# -- FLOPs and visible pairs ----------------------------------------------------------------------

def test_causal_flops_about_half():
    for T in (64, 1000, 4096):
        full = iomodel.attention_flops(2, T, T, 64, False)
        causal = iomodel.attention_flops(2, T, T, 64, True)
        assert causal / full == pytest.approx((T + 1) / (2 * T))
    assert iomodel.attention_flops(3, 100, 70, 32, False) == 4 * 3 * 100 * 70 * 32


@pytest.mark.parametrize("causal", [False, True])
def test_backward_flops_are_2_5x_forward(causal):
    for T, S in ((100, 100), (37, 250), (250, 37)):
        fwd = iomodel.attention_flops(2, T, S, 64, causal)
        assert iomodel.attention_flops(2, T, S, 64, causal, backward=True) == 2.5 * fwd
        assert iomodel.flash_backward(2, T, S, 64, "float32", causal,
                                      TileConfig()).flops == 2.5 * fwd
        assert iomodel.naive_forward(2, T, S, 64, "float32", causal).flops == fwd


def test_visible_pairs_brute_force():
    for T, S in itertools.product(range(0, 9), range(0, 9)):
        brute = sum(1 for i in range(T) for j in range(S) if j <= i + S - T)
        assert iomodel.visible_pairs(T, S, True) == brute, (T, S)
        assert iomodel.visible_pairs(T, S, False) == T * S
        assert int(Mask.make(causal=True).visible_matrix(T, S).sum()) == brute
