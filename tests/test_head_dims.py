"""Any head dim from 1 to 256, and v's head dim different from q's and k's (issue 12), forward and
backward against the float64 oracle on every path: the CPU twin (any head dim as it is), the
CUDA kernels (xp fixture's CuPy cases: q, k, v zero-padded to a kernel head dim, outputs sliced
back) and, on the CPU, that same GPU route with the twin standing in for the kernels
(``issue12_helpers.kernel_route``). The scale stays 1/sqrt(real d) when padded."""
import numpy as np
import pytest

import cuflash
from cuflash import TileConfig, checks
from cuflash._xp import to_numpy

from helpers import poison_gpu_outputs  # noqa: F401 (autouse fixture)
from helpers import ALL_DTYPES, case_seed, dtype_param, make_inputs, randn
from issue12_helpers import check_dense, kernel_route

HEAD_DIMS = [1, 8, 59, 111, 200, 256]
#: (head_dim of q and k, head_dim of v)
PAIRS = [(192, 128), (128, 192), (64, 16), (1, 7), (20, 3), (59, 111)]
T, S = 37, 45


def _tiles(xp):
    """Several tiles per row and column on the twin; the kernels' defaults on the GPU."""
    return (TileConfig(16, 32), TileConfig(32, 16)) if xp is np else (None, None)


def _inputs(xp, dtype, d, d_v, lead=(2,), seed=0, Hkv=None):
    lead_k = lead if Hkv is None else lead[:-1] + (Hkv,)
    q = randn(xp, lead + (T, d), dtype, seed)
    k = randn(xp, lead_k + (S, d), dtype, seed + 1)
    v = randn(xp, lead_k + (S, d_v), dtype, seed + 2)
    dout = randn(xp, lead + (T, d_v), dtype, seed + 3)
    return q, k, v, dout


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_head_dims(xp, dtype, d):
    q, k, v, dout = _inputs(xp, dtype, d, d, seed=case_seed("hd", d))
    fwd, bwd = _tiles(xp)
    check_dense(xp, q, k, v, dout, dtype=dtype, name=f"d={d}", fwd_tile=fwd, bwd_tile=bwd,
                dets=(True, False), causal=True)


@pytest.mark.parametrize("d,d_v", PAIRS, ids=lambda x: str(x))
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_head_dim_v_differs(xp, dtype, d, d_v):
    q, k, v, dout = _inputs(xp, dtype, d, d_v, seed=case_seed("dv", d, d_v))
    fwd, bwd = _tiles(xp)
    out, lse, grads = check_dense(xp, q, k, v, dout, dtype=dtype, name=f"d={d} d_v={d_v}",
                                  fwd_tile=fwd, bwd_tile=bwd, window=(9, 4))
    assert out.shape == (2, T, d_v)


@pytest.mark.parametrize("dtype", [dtype_param("bfloat16"), dtype_param("float32")])
def test_head_dim_v_with_gqa_and_variants(xp, dtype):
    """d_v != d together with GQA (8 query heads, 2 kv heads), softcap and ALiBi."""
    q, k, v, dout = _inputs(xp, dtype, 40, 24, lead=(2, 8), Hkv=2, seed=5)
    slopes = xp.asarray(np.linspace(0.05, 0.4, 8, dtype=np.float32))
    fwd, bwd = _tiles(xp)
    check_dense(xp, q, k, v, dout, dtype=dtype, name="gqa d_v", fwd_tile=fwd, bwd_tile=bwd,
                causal=True, softcap=3.0, alibi_slopes=slopes)


def test_default_scale_is_one_over_sqrt_real_d(xp):
    q, k, v, _ = _inputs(xp, np.float32, 59, 11, seed=9)
    a = cuflash.attention(q, k, v)
    b = cuflash.attention(q, k, v, scale=1 / np.sqrt(59))
    np.testing.assert_array_equal(to_numpy(a), to_numpy(b))


# -- the GPU route on the CPU: pads, slices, and what the kernels are handed ----------------------

@pytest.mark.parametrize("d,d_v", [(d, d) for d in HEAD_DIMS] + PAIRS, ids=lambda x: str(x))
@pytest.mark.parametrize("dtype", [dtype_param("float16"), dtype_param("float32")])
def test_kernel_route_pads(dtype, d, d_v):
    """The CUDA path's glue with the twin in the kernels' place: q, k, v (and dout, out) reach
    the 'kernels' padded to kernel_head_dim(max(d, d_v)) with a valid kernel spec; the outputs
    come back at the real head dims, C-contiguous, and pass the oracle criterion, with the scale
    of the real d."""
    q, k, v, dout = _inputs(np, dtype, d, d_v, seed=case_seed("route", d, d_v))
    with kernel_route() as fake:
        check_dense(np, q, k, v, dout, dtype=dtype, name=f"route d={d} d_v={d_v}",
                    dets=(True, False), causal=True)
    D = checks.kernel_head_dim(max(d, d_v))
    assert fake.calls == [("forward", D), ("backward", D), ("backward", D)]


@pytest.mark.parametrize("d,D", [(1, 16), (8, 16), (16, 16), (17, 24), (59, 64), (111, 112),
                                 (200, 200), (255, 256), (256, 256)])
def test_kernel_head_dim(d, D):
    assert checks.kernel_head_dim(d) == D and D in checks.KERNEL_HEAD_DIMS


def test_pad_and_unpad():
    x = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
    assert checks.pad_head_dim(x, 5, np) is x and checks.unpad(x, 5, np) is x
    p = checks.pad_head_dim(x[:, ::-1], 16, np)              # strided in, contiguous out
    assert p.shape == (2, 3, 16) and p.flags.c_contiguous
    np.testing.assert_array_equal(p[..., :5], x[:, ::-1])
    assert not p[..., 5:].any()
    u = checks.unpad(p, 5, np)
    assert u.flags.c_contiguous and not np.shares_memory(u, p)
    np.testing.assert_array_equal(u, x[:, ::-1])


# -- errors ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("which,d,d_v,match", [
    ("q", 0, 0, r"head_dim=0 \(q.shape\[-1\]\) is not supported; head_dim must be an int from "
                r"1 to 256"),
    ("q", 257, 257, r"head_dim=257 \(q.shape\[-1\]\) is not supported"),
    ("v", 16, 0, r"head_dim_v=0 \(v.shape\[-1\]\) is not supported"),
    ("v", 16, 300, r"head_dim_v=300 \(v.shape\[-1\]\) is not supported"),
])
def test_head_dim_errors(xp, which, d, d_v, match):
    q, k, v = make_inputs(xp, (2, 3, d), (2, 4, d), np.float32, seed=1)
    v = randn(xp, (2, 4, d_v), np.float32, seed=2)
    with pytest.raises(ValueError, match=match):
        cuflash.attention(q, k, v)
    with pytest.raises(ValueError, match=match):
        cuflash.naive_attention(q, k, v)


def test_q_and_k_head_dims_must_match(xp):
    q = randn(xp, (2, 3, 16), np.float32, seed=1)
    k = randn(xp, (2, 4, 24), np.float32, seed=2)
    v = randn(xp, (2, 4, 16), np.float32, seed=3)
    with pytest.raises(ValueError, match=r"head_dim must match: q.shape\[-1\]=16, "
                                         r"k.shape\[-1\]=24 \(v's head dim may differ"):
        cuflash.attention(q, k, v)


def test_backward_checks_dout_against_head_dim_v(xp):
    q, k, v, dout = _inputs(xp, np.float32, 16, 8, seed=4)
    out, res = cuflash.attention(q, k, v, return_residuals=True)
    with pytest.raises(ValueError, match=r"dout must have shape \(2, 37, 8\)"):
        cuflash.attention_backward(randn(xp, (2, T, 16), np.float32, seed=5), res)
