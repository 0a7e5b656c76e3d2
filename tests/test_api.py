"""Semantics of the public API: bottom-right causal alignment, rows with no key, default scale,
broadcasting of leading dims, empty inputs, strided/Fortran inputs, NaN propagation, dtypes,
attention_vjp, and the package's exports."""
import doctest
import math

import numpy as np
import pytest

import cuflash
from cuflash import TileConfig
from cuflash._xp import accum_dtype, to_numpy
from cuflash.oracle import oracle_attention, oracle_backward, rel_error

from helpers import ALL_DTYPES, assert_matches_oracle, dtype_param, make_inputs, randn


@pytest.mark.parametrize("T,S", [(5, 9), (9, 5), (7, 7), (1, 6), (6, 1), (40, 70), (70, 40)])
def test_causal_is_bottom_right_aligned(xp, T, S):
    """Causal row i equals full attention of q_i over keys 0..i+S-T (and 0 / -inf with none)."""
    d = 16
    tile = TileConfig(16, 16, 2, 1)   # several tiles at the larger sizes
    q, k, v = make_inputs(xp, (T, d), (S, d), np.float64, seed=100)
    out, lse = (to_numpy(a) for a in cuflash.attention(q, k, v, causal=True, tile=tile,
                                                        return_lse=True))
    for i in range(T):
        n = i + S - T + 1                       # keys 0..n-1 are visible
        if n <= 0:
            assert (out[i] == 0).all() and lse[i] == -np.inf, i
            continue
        row, row_lse = cuflash.attention(q[i:i + 1], k[:n], v[:n], causal=False, tile=tile,
                                         return_lse=True)
        assert rel_error(out[i], to_numpy(row)[0]) <= 1e-12, i
        assert rel_error(lse[i:i + 1], to_numpy(row_lse)) <= 1e-12, i


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_rows_without_keys(xp, dtype):
    """Causal, S < T: the first T - S rows have out == 0 and lse == -inf, the rest are finite."""
    T, S, d = 97, 30, 64
    q, k, v = make_inputs(xp, (2, T, d), (2, S, d), dtype, seed=101)
    out, lse = (to_numpy(a).astype(np.float64)
                for a in cuflash.attention(q, k, v, causal=True, return_lse=True))
    assert (out[:, :T - S] == 0).all()
    assert (lse[:, :T - S] == -np.inf).all()
    assert np.isfinite(out[:, T - S:]).all() and np.isfinite(lse[:, T - S:]).all()
    assert (np.abs(out[:, T - S:]).max(axis=-1) > 0).all()


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_default_scale_is_inverse_sqrt_d(xp, dtype):
    d = 72
    q, k, v = make_inputs(xp, (2, 50, d), (2, 61, d), dtype, seed=102)
    default = to_numpy(cuflash.attention(q, k, v, causal=True))
    explicit = to_numpy(cuflash.attention(q, k, v, causal=True, scale=1 / math.sqrt(d)))
    np.testing.assert_array_equal(default, explicit)
    other = cuflash.attention(q, k, v, causal=True, scale=0.3)
    assert not np.array_equal(to_numpy(other), default)
    ref, _ = oracle_attention(q, k, v, causal=True, scale=0.3)
    naive = cuflash.naive_attention(q, k, v, causal=True, scale=0.3)
    assert_matches_oracle(other, ref, naive, dtype=dtype, name="out scale=0.3")


def test_scale_multiplies_scores(xp):
    """attention(2q, scale=s) == attention(q, scale=2s) (2q is exact in float64)."""
    q, k, v = make_inputs(xp, (3, 40, 32), (3, 45, 32), np.float64, seed=103)
    a = cuflash.attention(2 * q, k, v, scale=0.1)
    b = cuflash.attention(q, k, v, scale=0.2)
    assert rel_error(a, to_numpy(b)) <= 1e-13


@pytest.mark.parametrize("q_lead,k_lead,out_lead", [
    ((2, 3), (1, 3), (2, 3)), ((1, 3), (2, 1), (2, 3)), ((2, 3), (3,), (2, 3)),
    ((), (4,), (4,)), ((5,), (), (5,))], ids=str)
def test_leading_dims_broadcast(xp, q_lead, k_lead, out_lead):
    T, S, d = 21, 34, 16
    q, k, v = make_inputs(xp, q_lead + (T, d), k_lead + (S, d), np.float32, seed=104)
    out, lse = cuflash.attention(q, k, v, causal=True, return_lse=True)
    assert out.shape == out_lead + (T, d) and lse.shape == out_lead + (T,)
    rep = [xp.ascontiguousarray(xp.broadcast_to(x, out_lead + x.shape[-2:])) for x in (q, k, v)]
    out_r, lse_r = cuflash.attention(*rep, causal=True, return_lse=True)
    np.testing.assert_array_equal(to_numpy(out), to_numpy(out_r))
    np.testing.assert_array_equal(to_numpy(lse), to_numpy(lse_r))


def test_v_broadcast_separately_from_k(xp):
    """k and v may broadcast differently: k (1, S, d), v (3, S, d)."""
    T, S, d = 10, 12, 16
    q = randn(xp, (3, T, d), np.float64, seed=105)
    k = randn(xp, (1, S, d), np.float64, seed=106)
    v = randn(xp, (3, S, d), np.float64, seed=107)
    out = cuflash.attention(q, k, v)
    ref, _ = oracle_attention(q, k, v)
    assert out.shape == (3, T, d) and rel_error(out, ref) <= 1e-12


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("q_shape,k_shape,out_lead", [
    ((2, 0, 16), (2, 5, 16), (2,)), ((2, 1, 0, 32), (1, 3, 5, 32), (2, 3)),
    ((0, 16), (0, 16), ())], ids=["T0", "T0_broadcast", "T0_S0"])
def test_empty_queries(xp, dtype, q_shape, k_shape, out_lead):
    q, k, v = make_inputs(xp, q_shape, k_shape, dtype, seed=108)
    out, lse = cuflash.attention(q, k, v, causal=True, return_lse=True)
    d = q_shape[-1]
    assert out.shape == out_lead + (0, d) and lse.shape == out_lead + (0,)
    assert out.dtype == np.dtype(dtype) and lse.dtype == accum_dtype(dtype)
    assert cuflash.attention(q, k, v).shape == out_lead + (0, d)


def test_empty_batch(xp):
    """A zero-size leading dim gives an empty result of the broadcast shape."""
    q, k, v = make_inputs(xp, (0, 3, 17, 16), (1, 3, 20, 16), np.float32, seed=109)
    out, lse = cuflash.attention(q, k, v, causal=True, return_lse=True)
    assert out.shape == (0, 3, 17, 16) and lse.shape == (0, 3, 17)


@pytest.mark.parametrize("dtype", [dtype_param("float16"), dtype_param("float32"),
                                   dtype_param("float64")])
def test_non_contiguous_and_fortran_inputs(xp, dtype):
    T, S, d = 45, 66, 64
    variants = {
        "step": lambda a: xp.asarray(np.repeat(to_numpy(a), 3, axis=-2))[..., ::3, :],
        "transposed": lambda a: xp.swapaxes(xp.ascontiguousarray(xp.swapaxes(a, -1, -2)), -1, -2),
        "fortran": xp.asfortranarray,
        "reversed": lambda a: xp.ascontiguousarray(a[..., ::-1, :])[..., ::-1, :],
    }
    q, k, v = make_inputs(xp, (2, T, d), (2, S, d), dtype, seed=110)
    ref_out, ref_lse = cuflash.attention(q, k, v, causal=True, return_lse=True)
    for name, f in variants.items():
        args = [f(a) for a in (q, k, v)]
        assert not args[0].flags.c_contiguous, name
        for a, b in zip(args, (q, k, v)):
            np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
        out, lse = cuflash.attention(*args, causal=True, return_lse=True)
        np.testing.assert_array_equal(to_numpy(out), to_numpy(ref_out), err_msg=name)
        np.testing.assert_array_equal(to_numpy(lse), to_numpy(ref_lse), err_msg=name)


# -- NaN propagation ------------------------------------------------------------------------------

def _nan_rows(out):
    return np.isnan(to_numpy(out).astype(np.float64)).any(axis=-1)


@pytest.mark.parametrize("dtype", [dtype_param("float16"), dtype_param("float32"),
                                   dtype_param("float64")])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_nan_in_q_row_stays_in_that_row(xp, dtype, causal):
    T, S, d = 97, 80, 32
    q, k, v = make_inputs(xp, (1, T, d), (1, S, d), dtype, seed=111)
    q[0, 50, 3] = np.nan
    out, lse = cuflash.attention(q, k, v, causal=causal, return_lse=True)
    expect = np.zeros(T, bool)
    expect[50] = True
    np.testing.assert_array_equal(_nan_rows(out)[0], expect)
    np.testing.assert_array_equal(np.isnan(to_numpy(lse))[0], expect)


@pytest.mark.parametrize("dtype", [dtype_param("float16"), dtype_param("float32"),
                                   dtype_param("float64")])
@pytest.mark.parametrize("T,S,j", [(97, 97, 40), (50, 97, 70), (97, 50, 10), (130, 130, 0),
                                   (130, 130, 129)])
def test_nan_in_k_row_reaches_exactly_the_rows_that_see_it(xp, dtype, T, S, j):
    d = 32
    q, k, v = make_inputs(xp, (1, T, d), (1, S, d), dtype, seed=112)
    k[0, j, 5] = np.nan
    out = cuflash.attention(q, k, v, causal=True)
    expect = j <= np.arange(T) + S - T          # query i sees key j
    np.testing.assert_array_equal(_nan_rows(out)[0], expect)


@pytest.mark.parametrize("dtype", [dtype_param("float16"), dtype_param("float32"),
                                   dtype_param("float64")])
def test_nan_in_v_row_reaches_every_row_without_causal(xp, dtype):
    q, k, v = make_inputs(xp, (1, 97, 32), (1, 150, 32), dtype, seed=113)
    v[0, 120, 7] = np.nan
    out = cuflash.attention(q, k, v, causal=False)
    assert _nan_rows(out).all()
    # only column 7 of v is NaN, so only column 7 of out is
    cols = np.isnan(to_numpy(out).astype(np.float64)).any(axis=(0, 1))
    np.testing.assert_array_equal(cols, np.arange(32) == 7)


# -- dtypes, return values ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_output_dtypes(xp, dtype):
    q, k, v = make_inputs(xp, (2, 17, 16), (2, 19, 16), dtype, seed=114)
    out = cuflash.attention(q, k, v)
    assert not isinstance(out, tuple)
    out2, lse = cuflash.attention(q, k, v, return_lse=True)
    assert out.dtype == out2.dtype == np.dtype(dtype)
    expected_lse = np.float64 if np.dtype(dtype) == np.float64 else np.float32
    assert lse.dtype == expected_lse
    assert type(out) is type(q) and type(lse) is type(q)
    np.testing.assert_array_equal(to_numpy(out), to_numpy(out2))


def test_numpy_scalar_arguments_accepted(xp):
    q, k, v = make_inputs(xp, (20, 16), (20, 16), np.float64, seed=115)
    a = cuflash.attention(q, k, v, causal=np.bool_(True), scale=np.float32(0.5))
    b = cuflash.attention(q, k, v, causal=True, scale=float(np.float32(0.5)))
    np.testing.assert_array_equal(to_numpy(a), to_numpy(b))


# -- attention_vjp --------------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [dtype_param("bfloat16"), dtype_param("float32"),
                                   dtype_param("float64")])
def test_vjp_equals_attention_and_backward(xp, dtype, causal):
    q, k, v = make_inputs(xp, (2, 57, 32), (2, 75, 32), dtype, seed=116)
    dout = randn(xp, (2, 57, 32), dtype, seed=117)
    fwd_tile, bwd_tile = TileConfig(32, 16, 4, 1), TileConfig(16, 32, 4, 1)
    out, vjp = cuflash.attention_vjp(q, k, v, causal=causal, scale=0.2, tile=fwd_tile,
                                     backward_tile=bwd_tile, deterministic=True)
    out2, lse2 = cuflash.attention(q, k, v, causal=causal, scale=0.2, tile=fwd_tile,
                                   return_lse=True)
    np.testing.assert_array_equal(to_numpy(out), to_numpy(out2))
    grads = vjp(dout)
    grads2 = cuflash.attention_backward(
        dout, cuflash.Residuals(q, k, v, out2, lse2, causal=causal, scale=0.2), tile=bwd_tile,
        deterministic=True)
    assert len(grads) == 3
    for a, b in zip(grads, grads2):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))


def test_vjp_defaults(xp):
    """Without keywords: non-causal, default scale; output and gradients match the oracle."""
    from cuflash.oracle import oracle_backward
    q, k, v = make_inputs(xp, (2, 40, 16), (2, 33, 16), np.float64, seed=118)
    dout = randn(xp, (2, 40, 16), np.float64, seed=119)
    out, vjp = cuflash.attention_vjp(q, k, v)
    assert rel_error(out, oracle_attention(q, k, v)[0]) <= 1e-12
    for g, ref in zip(vjp(dout), oracle_backward(dout, q, k, v)):
        assert rel_error(g, ref) <= 1e-12


# -- package --------------------------------------------------------------------------------------

def test_exports():
    for name in cuflash.__all__:
        assert getattr(cuflash, name) is not None, name
    assert cuflash.SUPPORTED_HEAD_DIMS == tuple(range(1, 257))
    assert cuflash.checks.KERNEL_HEAD_DIMS == tuple(range(16, 257, 8))
    assert isinstance(cuflash.__version__, str)


def test_package_docstring_example():
    failures, tried = doctest.testmod(cuflash, verbose=False)
    assert tried > 0 and failures == 0


def test_backward_takes_the_forwards_residuals(xp):
    """The backward runs with the forward's settings: attention(..., return_residuals=True)
    hands them over in one object (references to q, k, v, not copies); the old call, which took
    causal and scale again and gave wrong gradients when they differed, is a TypeError that
    says how to call it."""
    q, k, v = make_inputs(xp, (2, 23, 16), (2, 31, 16), np.float64, seed=301)
    do = make_inputs(xp, (2, 23, 16), (2, 1, 16), np.float64, seed=302)[0]
    kw = dict(causal=True, window=(5, None), softcap=3.0, scale=0.3)
    out, lse, res = cuflash.attention(q, k, v, return_lse=True, return_residuals=True, **kw)
    assert res.q is q and res.k is k and res.v is v and res.out is out and res.lse is lse
    assert res.options() == dict(kw, alibi_slopes=None, mask_mod=None)
    grads = cuflash.attention_backward(do, res)
    for g, r in zip(grads, oracle_backward(do, q, k, v, **kw)):
        assert rel_error(g, r) < 1e-10
    with pytest.raises(TypeError, match=r"takes the forward's residuals as one object.*"
                                        r"return_residuals=True.*\['causal'\]"):
        cuflash.attention_backward(do, q, k, v, out, lse, causal=True)
    with pytest.raises(TypeError, match="residuals of type"):
        cuflash.attention_backward(do, lse)
    with pytest.raises(TypeError, match="return_residuals must be a bool"):
        cuflash.attention(q, k, v, return_residuals=1)
