"""Forward pass against the float64 oracle: odd shapes, S != T, every dtype, causal and not,
several tiles. Pass criterion: err <= 2 · err(naive, same precision) + floor (helpers.py)."""
import numpy as np
import pytest

import cuflash
from cuflash import TileConfig
from cuflash._xp import accum_dtype, to_numpy
from cuflash.oracle import oracle_attention

from helpers import (  # poison_gpu_outputs: autouse fixture
    poison_gpu_outputs, case_seed, ALL_DTYPES, assert_matches_oracle, dtype_case, dtype_param,
                     make_inputs)

# (T, S, d): every T and S in {1, 17, 97, 257, 1000} and every d in {16, 32, 64, 72, 128, 256}
# appears; S < T, S = T and S > T all appear; each shape runs with every dtype × causal.
# T = S = 1000 with d = 256 runs once per dtype (test_forward_largest).
SHAPES = [(1, 1, 16), (1, 257, 32), (17, 1, 72), (17, 97, 64), (97, 17, 128), (97, 97, 256),
          (257, 1000, 16), (1000, 257, 72), (257, 257, 32), (1000, 1000, 64)]


def _lead(T, S, d):
    return (2,) if T * S * d <= 2_000_000 else (1,)


def _id(shape):
    return "T{}_S{}_d{}".format(*shape)


def check_forward(xp, T, S, d, dtype, causal, tile=None, lead=None, seed=0):
    lead = _lead(T, S, d) if lead is None else lead
    q, k, v = make_inputs(xp, lead + (T, d), lead + (S, d), dtype, seed)
    out, lse = assert_forward_matches(q, k, v, causal, dtype,
                                      f"T={T} S={S} d={d} causal={causal} tile={tile}", tile=tile)
    assert out.dtype == np.dtype(dtype)
    assert lse.dtype == accum_dtype(dtype)
    assert out.shape == lead + (T, d) and lse.shape == lead + (T,)
    assert not np.isnan(to_numpy(out)).any() and not np.isnan(to_numpy(lse)).any()


def assert_forward_matches(q, k, v, causal, dtype, name, tile=None):
    """cuflash.attention's out and lse against the float64 oracle, within 2x naive's error in
    the same precision; returns (out, lse)."""
    out, lse = cuflash.attention(q, k, v, causal=causal, tile=tile, return_lse=True)
    ref_out, ref_lse = oracle_attention(q, k, v, causal=causal)
    naive_out, naive_lse = cuflash.naive_attention(q, k, v, causal=causal, return_lse=True)
    assert_matches_oracle(out, ref_out, naive_out, dtype=dtype, name="out " + name)
    assert_matches_oracle(lse, ref_lse, naive_lse, dtype=dtype, name="lse " + name)
    return out, lse


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_forward_matches_oracle(xp, shape, dtype, causal):
    check_forward(xp, *shape, dtype, causal, seed=SHAPES.index(shape))


@pytest.mark.parametrize("dtype,causal", [
    dtype_case("float16", False, id="full"), dtype_case("bfloat16", True, id="causal"),
    dtype_case("float32", True, id="causal"), dtype_case("float64", False, id="full")])
def test_forward_largest(xp, dtype, causal):
    """T = S = 1000 at d = 256, the largest head dim: once per dtype (not every combination)."""
    check_forward(xp, 1000, 1000, 256, dtype, causal, lead=(1,), seed=20)


def climbing_inputs(xp, lead, T, S, d, dtype, rate, seed, lift=4.0):
    """q, k, v whose scores climb along the keys by `rate` (natural-log units) a key on even
    query rows and fall by as much on odd ones: an even row's running max moves on every key
    tile (by more than 8 log2 units once a tile holds 8 / (rate·log2 e) keys), an odd row's
    never moves after the first, and each warp of a kernel holds rows of both kinds. `lift`:
    q's first column (±lift); k's is divided by as much, so a steep climb fits float16."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(lead + (n, d)) for n in (T, S, S))
    q[..., 0] = np.where(np.arange(T) % 2 == 0, lift, -lift)
    k[..., 0] = rate * np.sqrt(d) / lift * np.arange(S)
    return tuple(xp.asarray(x.astype(dtype)) for x in (q, k, v))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [dtype_param("float16"), dtype_param("bfloat16")])
def test_running_max_leaps(xp, dtype, causal):
    """Scores climb by 100 (natural-log units) a key on even rows: P of a key the row max
    missed overflows (2^144), so a row max that skips any element of a thread's fragment
    (softmax.cuh, own_max) gives inf or NaN where the oracle gives the last visible key's v."""
    T, S, d = 130, 257, 64
    q, k, v = climbing_inputs(xp, (2,), T, S, d, dtype, 100.0, 7, lift=256.0)
    assert_forward_matches(q, k, v, causal, dtype, f"leaps causal={causal}")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("rate", [0.12, 0.5])
@pytest.mark.parametrize("shape", [(97, 300, 128), (130, 257, 64)], ids=_id)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_running_max_climbs(xp, dtype, shape, rate, causal):
    """The online softmax's reference max moves on many key tiles, on some rows of a warp and not
    others: a rescale of O and l skipped or applied to the wrong rows fails (random inputs move
    it by more than a few units only on the first tiles)."""
    T, S, d = shape
    q, k, v = climbing_inputs(xp, (2,), T, S, d, dtype, rate, case_seed(shape, rate))
    assert_forward_matches(q, k, v, causal, dtype, f"T={T} S={S} d={d} rate={rate} causal={causal}")


# Tiles the CUDA SIMT kernels accept (single stage; see cuflash/gpu/plan.py) for these head dims,
# so the same cases run on the GPU; the twin reads only block_m and block_n.
SIMT_TILES = [TileConfig(16, 16, 2, 1), TileConfig(16, 64, 4, 1), TileConfig(32, 32, 4, 1),
              TileConfig(64, 16, 4, 1), TileConfig(128, 32, 4, 1), TileConfig(32, 128, 4, 1)]
MMA_TILES = [TileConfig(64, 64, 4, 2, "mma"), TileConfig(128, 64, 4, 2, "mma")]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", [(97, 257, 72), (257, 97, 16), (1, 97, 64)], ids=_id)
@pytest.mark.parametrize("dtype", [dtype_param("float32"), dtype_param("bfloat16")])
@pytest.mark.parametrize("tile", SIMT_TILES, ids=TileConfig.short)
def test_forward_tiles(xp, tile, dtype, shape, causal):
    check_forward(xp, *shape, dtype, causal, tile=tile, seed=case_seed(tile, shape))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", [(97, 257, 64), (257, 97, 128)], ids=_id)
@pytest.mark.parametrize("dtype", [dtype_param("float16"), dtype_param("bfloat16")])
@pytest.mark.parametrize("tile", MMA_TILES, ids=TileConfig.short)
def test_forward_mma_tiles(xp, tile, dtype, shape, causal):
    check_forward(xp, *shape, dtype, causal, tile=tile, seed=case_seed(tile, shape))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("block_n", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("block_m", [16, 32, 64, 128, 256])
def test_twin_any_block_sizes(block_m, block_n, causal):
    """The twin (NumPy only) with every power-of-two tile, including ones no kernel launches."""
    check_forward(np, 97, 257, 72, np.float32, causal, tile=TileConfig(block_m, block_n), seed=3)
    check_forward(np, 257, 97, 32, np.float64, causal, tile=TileConfig(block_m, block_n), seed=4)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_twin_default_tile_is_used(dtype):
    """On the twin, tile=None is the same computation as tile=default_tile(d, dtype) (on the GPU
    the default also depends on the device's shared memory)."""
    q, k, v = make_inputs(np, (2, 97, 72), (2, 130, 72), dtype, seed=5)
    a = cuflash.attention(q, k, v, causal=True)
    b = cuflash.attention(q, k, v, causal=True, tile=cuflash.default_tile(72, dtype))
    np.testing.assert_array_equal(to_numpy(a), to_numpy(b))


@pytest.mark.parametrize("dtype", [dtype_param("float16"), dtype_param("bfloat16")])
def test_twin_rounds_p_like_the_kernels(dtype):
    """The twin rounds P (forward; P and dS backward) to the 16-bit input dtype before the
    products that consume them, as the tensor-core kernels do. The same problem with the inputs
    converted to float32 first runs the same float32 arithmetic without those roundings: the
    16-bit results must differ from it (rounding happened) by no more than rounding (a few u)."""
    from helpers import UNIT_ROUNDOFF
    from cuflash._xp import dtype_name
    from cuflash.oracle import normwise_error
    u = UNIT_ROUNDOFF[dtype_name(dtype)]
    q, k, v = make_inputs(np, (2, 97, 64), (2, 130, 64), dtype, seed=7)
    dout = make_inputs(np, (2, 97, 64), (2, 130, 64), dtype, seed=8)[0]
    tile = TileConfig(32, 32)
    out, lse = cuflash.attention(q, k, v, causal=True, tile=tile, return_lse=True)
    f32 = [x.astype(np.float32) for x in (dout, q, k, v)]
    out32, lse32 = cuflash.attention(*f32[1:], causal=True, tile=tile, return_lse=True)
    # out is rounded to the dtype at the end either way; compare after that rounding
    assert not np.array_equal(out, out32.astype(dtype)), "P was not rounded (forward)"
    assert normwise_error(out, out32.astype(np.float64)) <= 2 * u
    grads = cuflash.attention_backward(dout, cuflash.Residuals(q, k, v, out, lse, causal=True),
                                       tile=tile)
    grads32 = cuflash.attention_backward(
        f32[0], cuflash.Residuals(*f32[1:], out.astype(np.float32), lse, causal=True), tile=tile)
    for name, g, g32 in zip(("dq", "dk", "dv"), grads, grads32):
        assert not np.array_equal(g, g32.astype(dtype)), f"{name}: P/dS were not rounded"
        assert normwise_error(g, g32.astype(np.float64)) <= 2 * u, name
