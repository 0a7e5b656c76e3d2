"""Backward pass: attention_backward (deterministic and atomic dQ) against the float64 analytic
gradient (oracle_backward) with the naive-relative criterion, and float64 central finite
differences of the oracle and of the tiled path on tiny shapes."""
import numpy as np
import pytest

import cuflash
from cuflash import TileConfig
from cuflash._xp import dtype_name, to_numpy
from cuflash.oracle import oracle_attention, oracle_backward, rel_error

from helpers import (  # poison_gpu_outputs: autouse fixture
    poison_gpu_outputs, case_seed, ALL_DTYPES, FLOORS, assert_matches_oracle, dtype_case, dtype_param,
                     grad_scale, make_inputs, randn)

SHAPES = [(1, 1, 16), (1, 257, 32), (17, 1, 72), (17, 97, 64), (97, 17, 128), (97, 97, 256),
          (257, 1000, 16), (1000, 257, 72), (257, 257, 32), (1000, 1000, 64)]


def _id(shape):
    return "T{}_S{}_d{}".format(*shape)


def check_backward(xp, T, S, d, dtype, causal, deterministic, tile=None, lead=(2,), seed=0):
    q, k, v = make_inputs(xp, lead + (T, d), lead + (S, d), dtype, seed)
    dout = randn(xp, lead + (T, d), dtype, seed + 1000)
    out, lse = cuflash.attention(q, k, v, causal=causal, return_lse=True)
    grads = cuflash.attention_backward(dout, cuflash.Residuals(q, k, v, out, lse, causal=causal),
                                       tile=tile, deterministic=deterministic)
    refs = oracle_backward(dout, q, k, v, causal=causal)
    naive = cuflash.naive_attention_backward(dout, q, k, v, causal=causal)
    for name, g, x, ref, nv in zip(("dq", "dk", "dv"), grads, (q, k, v), refs, naive):
        assert g.dtype == x.dtype and g.shape == x.shape, name
        assert_matches_oracle(g, ref, nv, dtype=dtype, floor_scale=grad_scale(*refs), name=(
            f"{name} T={T} S={S} d={d} causal={causal} deterministic={deterministic} tile={tile}"))
    return grads


@pytest.mark.parametrize("deterministic", [True, False], ids=["det", "atomic"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_backward_matches_oracle(xp, shape, dtype, causal, deterministic):
    T, S, d = shape
    lead = (2,) if T * S * d <= 2_000_000 else (1,)
    check_backward(xp, T, S, d, dtype, causal, deterministic, lead=lead, seed=SHAPES.index(shape))


@pytest.mark.parametrize("dtype,causal,deterministic", [
    dtype_case("float16", False, False, id="full-atomic"),
    dtype_case("bfloat16", True, True, id="causal-det"),
    dtype_case("float32", True, False, id="causal-atomic"),
    dtype_case("float64", False, True, id="full-det")])
def test_backward_largest(xp, dtype, causal, deterministic):
    """T = S = 1000 at d = 256, once per dtype (each of causal and dQ mode appears twice)."""
    check_backward(xp, 1000, 1000, 256, dtype, causal, deterministic, lead=(1,), seed=40)


# Tiles valid for the SIMT backward kernels at these head dims (cuflash/gpu/plan.py).
SIMT_TILES = [TileConfig(16, 16, 2, 1), TileConfig(16, 64, 4, 1), TileConfig(32, 32, 4, 1),
              TileConfig(64, 16, 4, 1), TileConfig(128, 32, 4, 1), TileConfig(32, 128, 4, 1)]


@pytest.mark.parametrize("deterministic", [True, False], ids=["det", "atomic"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", [(97, 257, 72), (257, 97, 16)], ids=_id)
@pytest.mark.parametrize("dtype", [dtype_param("float32"), dtype_param("bfloat16")])
@pytest.mark.parametrize("tile", SIMT_TILES, ids=TileConfig.short)
def test_backward_tiles(xp, tile, dtype, shape, causal, deterministic):
    check_backward(xp, *shape, dtype, causal, deterministic, tile=tile,
                   seed=case_seed(tile, shape, deterministic))


@pytest.mark.parametrize("deterministic", [True, False], ids=["det", "atomic"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [dtype_param("float16"), dtype_param("bfloat16")])
def test_backward_mma_tile(xp, dtype, causal, deterministic):
    check_backward(xp, 97, 257, 64, dtype, causal, deterministic,
                   tile=TileConfig(64, 64, 4, 2, "mma"), seed=8)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("block_n", [16, 64, 256])
@pytest.mark.parametrize("block_m", [16, 32, 128, 256])
def test_twin_backward_any_block_sizes(block_m, block_n, causal):
    """The twin (NumPy only) with tiles no kernel launches."""
    for det in (True, False):
        check_backward(np, 97, 150, 40, np.float64, causal, det,
                       tile=TileConfig(block_m, block_n), seed=9)


# -- finite differences (float64) ---------------------------------------------------------------

def _finite_difference(f, arrays, h=1e-5):
    """Central differences of scalar f(*arrays) with respect to every entry of every array."""
    grads = []
    for idx in range(len(arrays)):
        g = np.zeros_like(arrays[idx])
        for pos in np.ndindex(arrays[idx].shape):
            plus = [a.copy() for a in arrays]
            minus = [a.copy() for a in arrays]
            plus[idx][pos] += h
            minus[idx][pos] -= h
            g[pos] = (f(*plus) - f(*minus)) / (2 * h)
        grads.append(g)
    return grads


FD_SHAPES = [(3, 5, 16), (5, 3, 16)]   # S > T, and S < T (causal: rows 0, 1 see no key)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", FD_SHAPES, ids=_id)
def test_oracle_gradient_matches_finite_differences(shape, causal):
    T, S, d = shape
    q, k, v = make_inputs(np, (T, d), (S, d), np.float64, seed=11)
    dout = randn(np, (T, d), np.float64, seed=12)

    def f(q_, k_, v_):
        return float((dout * oracle_attention(q_, k_, v_, causal=causal)[0]).sum())

    fd = _finite_difference(f, [q, k, v])
    for name, g, ref in zip(("dq", "dk", "dv"), oracle_backward(dout, q, k, v, causal=causal), fd):
        assert rel_error(g, ref) < 1e-7, name


@pytest.mark.parametrize("deterministic", [True, False], ids=["det", "atomic"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", FD_SHAPES, ids=_id)
def test_tiled_gradient_matches_finite_differences(xp, shape, causal, deterministic):
    """attention_backward against finite differences of attention itself (no oracle involved)."""
    T, S, d = shape
    q, k, v = make_inputs(np, (T, d), (S, d), np.float64, seed=13)
    dout = randn(np, (T, d), np.float64, seed=14)
    tile = TileConfig(16, 16, 2, 1)

    def f(q_, k_, v_):
        out = cuflash.attention(xp.asarray(q_), xp.asarray(k_), xp.asarray(v_), causal=causal,
                                tile=tile)
        return float((dout * to_numpy(out)).sum())

    fd = _finite_difference(f, [q, k, v])
    qx, kx, vx, dx = (xp.asarray(a) for a in (q, k, v, dout))
    out, lse = cuflash.attention(qx, kx, vx, causal=causal, tile=tile, return_lse=True)
    grads = cuflash.attention_backward(dx, cuflash.Residuals(qx, kx, vx, out, lse, causal=causal),
                                       tile=tile, deterministic=deterministic)
    for name, g, ref in zip(("dq", "dk", "dv"), grads, fd):
        assert rel_error(g, ref) < 1e-7, name


def test_tiled_gradient_finite_differences_many_tiles():
    """Twin float64 gradients against finite differences where several tiles meet (16×16 tiles,
    T=20, S=35), so the masked diagonal tiles and the dQ accumulation across tiles are exercised."""
    T, S, d = 20, 35, 16
    q, k, v = make_inputs(np, (T, d), (S, d), np.float64, seed=15)
    dout = randn(np, (T, d), np.float64, seed=16)
    tile = TileConfig(16, 16)
    for causal in (False, True):
        def f(q_, k_, v_):
            return float((dout * cuflash.attention(q_, k_, v_, causal=causal, tile=tile)).sum())

        fd = _finite_difference(f, [q, k, v])
        out, lse = cuflash.attention(q, k, v, causal=causal, tile=tile, return_lse=True)
        for det in (True, False):
            grads = cuflash.attention_backward(dout,
                                               cuflash.Residuals(q, k, v, out, lse, causal=causal),
                                               tile=tile, deterministic=det)
            for name, g, ref in zip(("dq", "dk", "dv"), grads, fd):
                assert rel_error(g, ref) < 1e-7, (name, causal, det)


# -- semantics ------------------------------------------------------------------------------------

@pytest.mark.parametrize("deterministic", [True, False], ids=["det", "atomic"])
@pytest.mark.parametrize("dtype", [dtype_param("float16"), dtype_param("float32"),
                                   dtype_param("float64")])
def test_rows_without_keys_get_zero_dq(xp, dtype, deterministic):
    """Causal with S < T: the first T - S queries see no key; their dq rows are exactly 0 and no
    gradient anywhere is NaN or infinite."""
    T, S, d = 97, 40, 32
    q, k, v = make_inputs(xp, (2, T, d), (2, S, d), dtype, seed=17)
    dout = randn(xp, (2, T, d), dtype, seed=18)
    out, lse = cuflash.attention(q, k, v, causal=True, return_lse=True)
    dq, dk, dv = (to_numpy(g).astype(np.float64) for g in cuflash.attention_backward(
        dout, cuflash.Residuals(q, k, v, out, lse, causal=True), deterministic=deterministic))
    assert (dq[:, :T - S] == 0).all()
    # row T - S sees exactly one key: P = 1 and D = dP, so its dq is 0 up to rounding;
    # every later row sees at least two keys and has a gradient
    assert (np.abs(dq[:, T - S + 1:]).max(axis=-1) > 0).all()
    for g in (dq, dk, dv):
        assert np.isfinite(g).all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_deterministic_is_bitwise_repeatable(dtype):
    """deterministic=True on the GPU: the same bits on every run (concurrent blocks must not
    change the order of any sum). The CPU twin has no concurrency, so repeating it proves
    nothing: this test is GPU-only; test_deterministic_head_ignores_its_batch runs on both."""
    from cuflash._xp import cupy_module
    xp = cupy_module()
    q, k, v = make_inputs(xp, (2, 257, 64), (2, 300, 64), dtype, seed=19)
    dout = randn(xp, (2, 257, 64), dtype, seed=20)
    out, lse = cuflash.attention(q, k, v, causal=True, return_lse=True)
    runs = [cuflash.attention_backward(dout, cuflash.Residuals(q, k, v, out, lse, causal=True),
                                       deterministic=True)
            for _ in range(3)]
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            np.testing.assert_array_equal(to_numpy(a), to_numpy(b))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_deterministic_head_ignores_its_batch(xp, dtype):
    """deterministic=True: a head's gradients are the same bits whether it runs alone or in a
    batch of 5 beside other heads (a fixed summation order per head)."""
    q, k, v = make_inputs(xp, (5, 130, 64), (5, 150, 64), dtype, seed=19)
    dout = randn(xp, (5, 130, 64), dtype, seed=20)
    out, lse = cuflash.attention(q, k, v, causal=True, return_lse=True)
    batch = cuflash.attention_backward(dout, cuflash.Residuals(q, k, v, out, lse, causal=True),
                                       deterministic=True)
    alone = cuflash.attention_backward(
        dout[3:4], cuflash.Residuals(q[3:4], k[3:4], v[3:4], out[3:4], lse[3:4], causal=True),
        deterministic=True)
    for a, b in zip(batch, alone):
        np.testing.assert_array_equal(to_numpy(a)[3:4], to_numpy(b))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_deterministic_and_atomic_agree(xp, dtype):
    q, k, v = make_inputs(xp, (2, 130, 72), (2, 97, 72), dtype, seed=21)
    dout = randn(xp, (2, 130, 72), dtype, seed=22)
    out, lse = cuflash.attention(q, k, v, return_lse=True)
    det = cuflash.attention_backward(dout, cuflash.Residuals(q, k, v, out, lse), deterministic=True)
    atomic = cuflash.attention_backward(dout, cuflash.Residuals(q, k, v, out, lse),
                                        deterministic=False)
    for name, a, b in zip(("dq", "dk", "dv"), det, atomic):
        assert rel_error(b, to_numpy(a).astype(np.float64)) <= FLOORS[dtype_name(dtype)], name


@pytest.mark.parametrize("deterministic", [True, False], ids=["det", "atomic"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_broadcast_gradients_sum_over_repeated_dims(xp, dtype, deterministic):
    """q (5,3,T,d) with k, v (1,3,S,d): dk, dv come back with k's shape, equal to the sum over the
    broadcast axis of the gradients computed with k, v explicitly repeated. 16-bit: the sum runs
    in float32 and is rounded once, so dk, dv are exactly the rounded float32 sum of the repeated
    gradients (five 16-bit terms sum exactly in float32; summing in the 16-bit dtype would
    round four times)."""
    T, S, d = 33, 50, 32
    q, k, v = make_inputs(xp, (5, 3, T, d), (1, 3, S, d), dtype, seed=23)
    dout = randn(xp, (5, 3, T, d), dtype, seed=24)
    out, lse = cuflash.attention(q, k, v, causal=True, return_lse=True)
    dq, dk, dv = cuflash.attention_backward(dout, cuflash.Residuals(q, k, v, out, lse, causal=True),
                                            deterministic=deterministic)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    k_rep, v_rep = (xp.ascontiguousarray(xp.broadcast_to(x, (5, 3, S, d))) for x in (k, v))
    out_r, lse_r = cuflash.attention(q, k_rep, v_rep, causal=True, return_lse=True)
    np.testing.assert_array_equal(to_numpy(out), to_numpy(out_r))
    dq_r, dk_r, dv_r = cuflash.attention_backward(
        dout, cuflash.Residuals(q, k_rep, v_rep, out_r, lse_r, causal=True),
        deterministic=deterministic)
    floor = FLOORS[dtype_name(dtype)]
    assert rel_error(dq, to_numpy(dq_r).astype(np.float64)) <= floor
    for g, g_rep in ((dk, dk_r), (dv, dv_r)):
        summed = to_numpy(g_rep).astype(np.float64).sum(axis=0, keepdims=True)
        assert rel_error(g, summed) <= floor
        if np.dtype(dtype).itemsize < 4:
            np.testing.assert_array_equal(to_numpy(g), summed.astype(np.float32).astype(dtype))
    # and against the oracle, which broadcasts on its own
    refs = oracle_backward(dout, q, k, v, causal=True)
    naive = cuflash.naive_attention_backward(dout, q, k, v, causal=True)
    for name, g, ref, nv in zip(("dq", "dk", "dv"), (dq, dk, dv), refs, naive):
        assert_matches_oracle(g, ref, nv, dtype=dtype, name=name + " broadcast")


def test_broadcast_gradient_of_unbatched_q(xp):
    """q (T, d) against k, v (4, S, d): out is (4, T, d) and dq is summed back to (T, d)."""
    T, S, d = 20, 30, 16
    q, k, v = make_inputs(xp, (T, d), (4, S, d), np.float64, seed=25)
    dout = randn(xp, (4, T, d), np.float64, seed=26)
    out, lse = cuflash.attention(q, k, v, return_lse=True)
    assert out.shape == (4, T, d) and lse.shape == (4, T)
    dq, dk, dv = cuflash.attention_backward(dout, cuflash.Residuals(q, k, v, out, lse))
    assert dq.shape == (T, d)
    q_rep = xp.ascontiguousarray(xp.broadcast_to(q, (4, T, d)))
    dq_r = cuflash.attention_backward(dout, cuflash.Residuals(q_rep, k, v, out, lse))[0]
    assert rel_error(dq, to_numpy(dq_r).sum(axis=0)) <= 1e-12


@pytest.mark.parametrize("dtype", [dtype_param("float32"), dtype_param("bfloat16")])
def test_non_contiguous_inputs_backward(xp, dtype):
    """Strided, transposed and Fortran-ordered q, k, v, dout give the gradients of their
    contiguous copies."""
    T, S, d = 40, 57, 32
    base_q = randn(xp, (2, 2 * T, d), dtype, seed=27)
    q = base_q[:, ::2]                                              # step slice
    k = xp.swapaxes(randn(xp, (2, d, S), dtype, seed=28), 1, 2)     # transposed view
    v = xp.asfortranarray(randn(xp, (2, S, d), dtype, seed=29))     # Fortran order
    dout = randn(xp, (2, T, d), dtype, seed=30)[:, ::-1]            # negative stride
    args = (q, k, v)
    out, res = cuflash.attention(*args, causal=True, return_residuals=True)
    grads = cuflash.attention_backward(dout, res, deterministic=True)
    cont = [xp.ascontiguousarray(a) for a in (dout, q, k, v)]
    out_c, res_c = cuflash.attention(*cont[1:], causal=True, return_residuals=True)
    np.testing.assert_array_equal(to_numpy(out), to_numpy(out_c))
    grads_c = cuflash.attention_backward(cont[0], res_c, deterministic=True)
    for a, b in zip(grads, grads_c):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))


def test_empty_queries_backward(xp):
    """T == 0: dq is empty, dk and dv are zeros of k's and v's shapes and dtype."""
    q = randn(xp, (2, 0, 16), np.float32, seed=31)
    k, v = (randn(xp, (2, 5, 16), np.float32, seed=s) for s in (32, 33))
    out, lse = cuflash.attention(q, k, v, return_lse=True)
    dq, dk, dv = cuflash.attention_backward(randn(xp, (2, 0, 16), np.float32, 34),
                                            cuflash.Residuals(q, k, v, out, lse))
    assert dq.shape == (2, 0, 16) and dk.shape == (2, 5, 16) and dv.shape == (2, 5, 16)
    assert dq.dtype == dk.dtype == dv.dtype == np.float32
    assert not to_numpy(dk).any() and not to_numpy(dv).any()
