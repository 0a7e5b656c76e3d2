"""Bad inputs raise the documented exception type with a message that names the argument and the
bad value (and, where it helps, what is valid)."""
import re

import numpy as np
import pytest

import cuflash
from cuflash import TileConfig
from cuflash._xp import cupy_module, to_numpy

from helpers import make_inputs, randn


def qkv(xp, T=7, S=9, d=16, dtype=np.float32, lead=(2,)):
    return make_inputs(xp, lead + (T, d), lead + (S, d), dtype, seed=200)


def _esc(text):
    return re.escape(text)


def to_list(a):
    return to_numpy(a).tolist()


# -- shapes ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_rank_too_small(xp, which):
    args = dict(zip("qkv", qkv(xp, S=7)))
    args[which] = randn(xp, (16,), np.float32, seed=201)
    with pytest.raises(ValueError, match=rf"{which} must have at least 2 dims.*\(16,\)"):
        cuflash.attention(**args)


@pytest.mark.parametrize("shape", [(2, 9, 32), (2, 9, 8)])
def test_head_dims_must_match(xp, shape):
    """q and k share a head dim; v's may differ (tests/test_head_dims.py)."""
    q, k, v = qkv(xp)
    k = randn(xp, shape, np.float32, seed=202)
    with pytest.raises(ValueError, match=rf"head_dim must match.*k\.shape\[-1\]={shape[-1]}"):
        cuflash.attention(q, k, v)


def test_leading_dims_must_broadcast(xp):
    q = randn(xp, (2, 7, 16), np.float32, seed=203)
    k, v = (randn(xp, (3, 9, 16), np.float32, seed=s) for s in (204, 205))
    with pytest.raises(ValueError, match=_esc("leading dims of q (2,), k (3,) and v (3,) do not "
                                              "broadcast")):
        cuflash.attention(q, k, v)


def test_k_v_sequence_lengths_must_match(xp):
    q, k, _ = qkv(xp)
    v = randn(xp, (2, 10, 16), np.float32, seed=206)
    with pytest.raises(ValueError, match=_esc("k and v must have the same sequence length: "
                                              "k.shape=(2, 9, 16), v.shape=(2, 10, 16)")):
        cuflash.attention(q, k, v)


@pytest.mark.parametrize("d", [0, 257, 260, 512])
def test_unsupported_head_dim(xp, d):
    q, k, v = qkv(xp, d=d, T=3, S=2)
    with pytest.raises(ValueError, match=rf"head_dim={d} \(q.shape\[-1\]\) is not supported; "
                                         rf"head_dim must be an int from 1 to 256"):
        cuflash.attention(q, k, v)


# -- dtypes and array types -----------------------------------------------------------------------

@pytest.mark.parametrize("which", ["q", "k", "v"])
@pytest.mark.parametrize("bad", [np.int32, np.int64, np.bool_, np.complex64, np.uint8],
                         ids=lambda t: np.dtype(t).name)
def test_non_float_dtype(xp, which, bad):
    args = dict(zip("qkv", qkv(xp)))
    args[which] = args[which].astype(bad)
    name = np.dtype(bad).name
    with pytest.raises(TypeError, match=rf"{which} has dtype {name}; attention needs floating "
                                        rf"point.*float16"):
        cuflash.attention(**args)


def test_mixed_dtypes(xp):
    q, k, v = qkv(xp)
    with pytest.raises(TypeError, match=_esc("q, k, v must share one dtype; got q: float32, "
                                             "k: float16, v: float32")):
        cuflash.attention(q, k.astype(np.float16), v)


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_python_lists_rejected(which):
    args = dict(zip("qkv", qkv(np)))
    args[which] = args[which].tolist()
    with pytest.raises(TypeError, match=rf"{which} must be a numpy.ndarray or cupy.ndarray, "
                                        rf"got list"):
        cuflash.attention(**args)


@pytest.mark.gpu
def test_mixed_numpy_and_cupy():
    cp = cupy_module()
    q, k, v = qkv(np)
    with pytest.raises(TypeError, match=_esc("inputs mix NumPy and CuPy arrays (q: numpy, "
                                             "k: cupy, v: numpy)")):
        cuflash.attention(q, cp.asarray(k), v)


@pytest.mark.gpu
def test_backward_arrays_on_another_device():
    cp = cupy_module()
    q, k, v = qkv(cp)
    out, lse = cuflash.attention(q, k, v, return_lse=True)
    with pytest.raises(TypeError, match="dout is on a different device"):
        cuflash.attention_backward(cp.asnumpy(out), cuflash.Residuals(q, k, v, out, lse))
    with pytest.raises(TypeError, match="lse is on a different device"):
        cuflash.attention_backward(out, cuflash.Residuals(q, k, v, out, cp.asnumpy(lse)))


# -- scalar arguments -----------------------------------------------------------------------------

@pytest.mark.parametrize("scale", [0, 0.0, -0.5, float("inf"), float("-inf"), float("nan")],
                         ids=repr)
def test_bad_scale_value(xp, scale):
    with pytest.raises(ValueError, match=rf"scale={re.escape(repr(scale))} must be finite and > 0"):
        cuflash.attention(*qkv(xp), scale=scale)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("opts,match", [
    (dict(scale=1e39), r"scale=1e\+39 is too large: scale·log2\(e\) overflows float32 \(the "
                       r"scores' dtype for \w+ inputs\)"),
    (dict(softcap=1e39), r"softcap=1e\+39 is too large for scale=0.\d+ in float32"),
    (dict(softcap=1e38), r"softcap=1e\+38 is too large .* scale / c at least 1.17549e-38"),
    (dict(scale=1e-3, softcap=1e36), r"softcap=1e\+36 is too large for scale=0.001"),
    (dict(alibi_slopes=1e39), r"alibi_slopes must be at most 7.9\d+e\+28 in magnitude in "
                              r"float32"),
], ids=["scale", "softcap", "softcap-flushes", "softcap-small-scale", "alibi"])
def test_score_constants_finite_in_the_scores_dtype(xp, dtype, opts, match):
    """Finite in float64 but not where the scores are computed (float32 for 16-bit and float32
    inputs): before, these passed the checks and the twin returned NaN (or, for a softcap whose
    tanh argument flushes to zero on the GPU, uniform weights)."""
    q, k, v = qkv(xp, dtype=getattr(np, dtype))
    if "alibi_slopes" in opts:   # one slope per leading entry, the second too large
        opts = dict(alibi_slopes=xp.asarray([1.0, opts["alibi_slopes"]]))
    with pytest.raises(ValueError, match=match):
        cuflash.attention(q, k, v, **opts)


def test_score_constants_in_float64_take_float64s_range(xp):
    """A scale past float32's range in float64, its scores capped within the kernels' logits;
    a cap whose logits pass 2^63 refused (on the GPU, call 185 on an H100, softcap=1e39 gave NaN:
    the exponent's fused multiply-add kept the max's rounding, 2^76, checks.logit_limit)."""
    q, k, v = qkv(xp, dtype=np.float64)
    out = cuflash.attention(q, k, v, scale=1e39, softcap=1e15)
    assert bool(xp.isfinite(out).all())
    with pytest.raises(ValueError, match=r"softcap=1e\+39 is too large in float64 \(the scores' "
                                         r"dtype for float64 inputs\): the capped logits "
                                         r"c·log2\(e\) must stay below 2\^63"):
        cuflash.attention(q, k, v, scale=1e39, softcap=1e39)
    with pytest.raises(ValueError, match=r"softcap=2000000000.0 is too large in float32 .* below 2\^31"):
        cuflash.attention(*qkv(xp), softcap=2e9)
    assert cuflash.checks.logit_limit(np.float16) == 2.0 ** 31


def test_alibi_bias_within_the_logit_limit(xp):
    """A slope whose bias slope·distance·log2(e) reaches 2^31 at the call's longest distance
    (max(T, S) - 1) is refused, dense and packed: a row whose visible keys all lie that far
    away has its max there, past what the GPU's exponents hold (checks.logit_limit). Just
    below the limit, the call runs and stays finite."""
    q, k, v = qkv(xp)                                  # T = 7, S = 9: distances up to 8
    just_over = 2.0 ** 31 / (8 * 1.4426950408889634) * 1.001
    with pytest.raises(ValueError, match=r"alibi_slopes up to 1.86\d+e\+08 in magnitude are too "
                                         r"large for query-key distances up to 8 in float32 .* "
                                         r"below 2\^31"):
        cuflash.attention(q, k, v, alibi_slopes=xp.asarray([1.0, just_over]))
    out = cuflash.attention(q, k, v, alibi_slopes=xp.asarray([1.0, just_over / 1.01]))
    assert bool(xp.isfinite(out).all())
    qp, kp, vp = (a.transpose(1, 0, 2) for a in qkv(xp, T=7, S=7))  # (tokens, heads, d)
    cu = xp.asarray(np.array([0, 3, 7], np.int32))
    # packed: the longest sequence has 4 tokens, distances up to 3
    with pytest.raises(ValueError, match=r"for query-key distances up to 3 in float32"):
        cuflash.attention_varlen(qp, kp, vp, cu, cu, alibi_slopes=xp.asarray([1.0, 5e8]))


@pytest.mark.parametrize("scale", ["0.5", True, [0.5], 1j], ids=repr)
def test_bad_scale_type(xp, scale):
    with pytest.raises(TypeError, match=rf"scale must be a real number or None, got "
                                        rf"{re.escape(repr(scale))}"):
        cuflash.attention(*qkv(xp), scale=scale)


@pytest.mark.parametrize("causal", [1, 0, "yes", None, 1.0], ids=repr)
def test_causal_must_be_bool(xp, causal):
    with pytest.raises(TypeError, match=rf"causal must be a bool, got {re.escape(repr(causal))}"):
        cuflash.attention(*qkv(xp), causal=causal)


@pytest.mark.parametrize("flag", ["return_lse", "return_residuals"])
@pytest.mark.parametrize("value", [0, "no", None], ids=repr)
def test_return_flags_must_be_bool(xp, flag, value):
    """attention's return_lse was taken by truth value ('no' returned the lse)."""
    with pytest.raises(TypeError, match=rf"{flag} must be a bool, got {re.escape(repr(value))}"):
        cuflash.attention(*qkv(xp), **{flag: value})


def test_deterministic_must_be_bool(xp):
    q, k, v = qkv(xp)
    out, lse = cuflash.attention(q, k, v, return_lse=True)
    with pytest.raises(TypeError, match="deterministic must be a bool, got 1"):
        cuflash.attention_backward(out, cuflash.Residuals(q, k, v, out, lse), deterministic=1)


# -- TileConfig -----------------------------------------------------------------------------------

_BAD_TILES = [
    ("block_m", 48, "TileConfig.block_m=48 must be a power of two in 16..256"),
    ("block_m", 8, "TileConfig.block_m=8 must be a power of two"),
    ("block_m", 512, "TileConfig.block_m=512 must be a power of two in 16..256"),
    ("block_n", 0, "TileConfig.block_n=0 must be a power of two"),
    ("block_n", 64.0, "TileConfig.block_n=64.0 must be a power of two"),
    ("block_m", True, "TileConfig.block_m=True must be a power of two"),
    ("num_warps", 3, "TileConfig.num_warps=3 must be one of 1, 2, 4, 8, 12, 16"),
    ("num_warps", True, "TileConfig.num_warps=True must be one of"),
    ("num_warps", 32, "TileConfig.num_warps=32 must be one of"),
    ("num_stages", 0, "TileConfig.num_stages=0 must be one of 1, 2, 3, 4"),
    ("num_stages", 5, "TileConfig.num_stages=5 must be one of"),
    ("num_stages", True, "TileConfig.num_stages=True must be one of"),
    # == let these through (4.0 == 4); then short() said w4.0 and hash() failed on arrays
    ("num_warps", 4.0, "TileConfig.num_warps=4.0 must be one of"),
    ("num_stages", np.array(2), r"TileConfig.num_stages=array\(2\) must be one of"),
    ("num_warps", np.array([4]), r"TileConfig.num_warps=array\(\[4\]\) must be one of"),
    ("kernel", "foo", "TileConfig.kernel='foo' must be one of \\('simt', 'mma', 'wgmma', 'dmma', 'tf32', 'tf32x3', 'wgmma_tf32', 'wgmma_f16x3', 'wgmma_f16x1', 'wgmma_f16s'\\)"),
    ("kernel", "SIMT", "TileConfig.kernel='SIMT' must be one of"),
]


@pytest.mark.parametrize("field,value,match", _BAD_TILES,
                         ids=[f"{f}={v!r}" for f, v, _ in _BAD_TILES])
def test_invalid_tile_config(field, value, match):
    with pytest.raises(ValueError, match=match):
        TileConfig(**{field: value})


@pytest.mark.parametrize("kernel,dtype,takes", [
    ("mma", np.float32, "float16 or bfloat16"), ("wgmma", np.float64, "float16 or bfloat16"),
    ("dmma", np.float16, "float64"), ("tf32", np.float64, "float32"),
    ("wgmma_f16x3", np.float16, "float32")])
def test_a_tile_of_a_family_that_does_not_take_the_dtype(kernel, dtype, takes):
    """tile.FAMILY_DTYPES on every path: the CPU twin ran any family's tile on any dtype (its
    block sizes only), where a GPU refuses it; forward and backward alike."""
    q, k, v = qkv(np, dtype=dtype)
    want = (rf"TileConfig.kernel={kernel!r} needs {takes} inputs only; these are "
            rf"{np.dtype(dtype).name}")
    _both_passes_raise(q, k, v, TileConfig(64, 64, 4, 2, kernel), ValueError, want)
    cuflash.attention(q, k, v, tile=TileConfig(64, 64, 4, 1, "simt"))   # every dtype


def _both_passes_raise(q, k, v, tile, exc, match):
    """attention(tile=tile) and attention_backward(tile=tile) both raise exc matching match."""
    with pytest.raises(exc, match=match):
        cuflash.attention(q, k, v, tile=tile)
    out, lse = cuflash.attention(q, k, v, return_lse=True)
    with pytest.raises(exc, match=match):
        cuflash.attention_backward(out, cuflash.Residuals(q, k, v, out, lse), tile=tile)


def test_tile_replace_is_checked():
    with pytest.raises(ValueError, match="TileConfig.block_n=24"):
        TileConfig().replace(block_n=24)


@pytest.mark.parametrize("tile", [(64, 64), {"block_m": 64}, "simt", 64], ids=repr)
def test_tile_of_wrong_type(xp, tile):
    msg = rf"tile must be a cuflash.TileConfig or None, got {type(tile).__name__}"
    _both_passes_raise(*qkv(xp), tile, TypeError, msg)


# -- attention_backward's extra arrays ------------------------------------------------------------

def _fwd(xp, dtype=np.float32):
    q, k, v = qkv(xp, dtype=dtype)
    out, lse = cuflash.attention(q, k, v, return_lse=True)
    return q, k, v, out, lse


@pytest.mark.parametrize("which", ["dout", "out"])
@pytest.mark.parametrize("shape", [(2, 7, 32), (2, 8, 16), (7, 16), (1, 2, 7, 16)], ids=str)
def test_backward_wrong_shape(xp, which, shape):
    q, k, v, out, lse = _fwd(xp)
    args = dict(dout=out, out=out)
    args[which] = randn(xp, shape, np.float32, seed=209)
    with pytest.raises(ValueError, match=rf"{which} must have shape {_esc(str((2, 7, 16)))}.*"
                                         rf"got {_esc(str(shape))}"):
        cuflash.attention_backward(args["dout"], cuflash.Residuals(q, k, v, args["out"], lse))


@pytest.mark.parametrize("shape", [(2, 8), (7,), (2, 7, 1), (2, 7, 16)], ids=str)
def test_backward_wrong_lse_shape(xp, shape):
    q, k, v, out, lse = _fwd(xp)
    with pytest.raises(ValueError, match=rf"lse must have shape {_esc(str((2, 7)))}.*"
                                         rf"got {_esc(str(shape))}"):
        cuflash.attention_backward(
            out, cuflash.Residuals(q, k, v, out, randn(xp, shape, np.float32, seed=210)))


@pytest.mark.parametrize("which", ["dout", "out"])
def test_backward_wrong_dtype(xp, which):
    q, k, v, out, lse = _fwd(xp)
    args = dict(dout=out, out=out)
    args[which] = out.astype(np.float64)
    with pytest.raises(TypeError, match=rf"{which} must have dtype float32, got float64"):
        cuflash.attention_backward(args["dout"], cuflash.Residuals(q, k, v, args["out"], lse))


@pytest.mark.parametrize("dtype,lse_dtype,expected", [
    (np.float32, np.float64, "float32"), (np.float16, np.float16, "float32"),
    (np.float64, np.float32, "float64")], ids=["f32-f64", "f16-f16", "f64-f32"])
def test_backward_wrong_lse_dtype(xp, dtype, lse_dtype, expected):
    q, k, v, out, lse = _fwd(xp, dtype)
    got = np.dtype(lse_dtype).name
    with pytest.raises(TypeError, match=rf"lse must have dtype {expected}, got {got}"):
        cuflash.attention_backward(out, cuflash.Residuals(q, k, v, out, lse.astype(lse_dtype)))


def test_backward_list_argument(xp):
    q, k, v, out, lse = _fwd(xp)
    with pytest.raises(TypeError, match="dout must be a numpy.ndarray or cupy.ndarray, got list"):
        cuflash.attention_backward(to_list(out), cuflash.Residuals(q, k, v, out, lse))
    with pytest.raises(TypeError, match="lse must be a numpy.ndarray or cupy.ndarray, got tuple"):
        cuflash.attention_backward(out, cuflash.Residuals(q, k, v, out, tuple(to_list(lse))))


def test_backward_checks_q_k_v_too(xp):
    q, k, v, out, lse = _fwd(xp)
    with pytest.raises(ValueError, match=r"head_dim=0 \(q.shape\[-1\]\) is not supported"):
        cuflash.attention_backward(
            out[..., :0],
            cuflash.Residuals(q[..., :0], k[..., :0], v[..., :0], out[..., :0], lse))


# -- attention_vjp --------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,bad", [({"foo": 1}, "['foo']"), ({"return_lse": True},
                                        "['return_lse']"), ({"block_m": 64, "z": 0},
                                        "['block_m', 'z']")], ids=["foo", "return_lse", "two"])
def test_vjp_unknown_keywords(xp, kwargs, bad):
    with pytest.raises(TypeError, match=rf"unexpected keyword arguments {_esc(bad)}.*valid: "
                                        rf"causal, scale, window, softcap, alibi_slopes, mask_mod, tile, "
                                        rf"precision, backward_tile, deterministic"):
        cuflash.attention_vjp(*qkv(xp), **kwargs)


def test_vjp_checks_its_arguments_up_front(xp):
    """Bad backward arguments are reported by attention_vjp itself, named as the caller wrote
    them."""
    with pytest.raises(TypeError, match="backward_tile must be a cuflash.TileConfig or None, "
                                        "got str"):
        cuflash.attention_vjp(*qkv(xp), backward_tile="simt")
    with pytest.raises(TypeError, match="deterministic must be a bool, got 'yes'"):
        cuflash.attention_vjp(*qkv(xp), deterministic="yes")
    with pytest.raises(TypeError, match="causal must be a bool, got 2"):
        cuflash.attention_vjp(*qkv(xp), causal=2)


def test_vjp_dout_is_checked(xp):
    q, k, v = qkv(xp)
    _, vjp = cuflash.attention_vjp(q, k, v)
    with pytest.raises(ValueError, match=_esc("dout must have shape (2, 7, 16)")):
        vjp(randn(xp, (2, 7, 32), np.float32, seed=211))


# -- the naive baseline checks the same way -------------------------------------------------------

def test_naive_checks_arguments(xp):
    q, k, v = qkv(xp)
    with pytest.raises(TypeError, match="causal must be a bool"):
        cuflash.naive_attention(q, k, v, causal="no")
    with pytest.raises(ValueError, match="head_dim must match"):
        cuflash.naive_attention(q, k[..., :8], v)
    with pytest.raises(ValueError, match=_esc("dout must have shape (2, 7, 16)")):
        cuflash.naive_attention_backward(q[:, :3], q, k, v)
