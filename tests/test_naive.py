"""The naive (materialized) path against the float64 oracle with its own bounds, forward and
backward, every dtype, causal and not, on both array modules. Naive is the yardstick of the
criterion (err <= 2 · err(naive) + floor, helpers.py), so a naive path that got worse would widen
every check: here its error is held to a fixed multiple of the dtype's unit roundoff u.

Calibration (``python tools/calibrate_bounds.py``: NumPy, 9 shapes, causal and not, 4 seeds), the
naive path's largest error in units of u, at the commit that set these bounds: float16 / bfloat16
max 5.1 / 4.9, normwise 2.9 / 2.0, |bias| 1.9 / 1.0 (gradients; out below that); lse (relative to
max |lse|, in units of the dtype's u) max 0.87 / 0.51, |bias| 0.10 / 0.07; float32: max 30,
normwise 10, |bias| 1.2, lse max 4.1 (units of u(float32)). Each bound is 2-4× that: a product
scaled by 5% (12.8 u in bfloat16), an lse off by log 1.02 (|bias| >= 0.68 u in bfloat16), or a
float32 sum done in float16 (thousands of u(float32)) fails. float64 takes float32's bounds in
units of its own u; on NumPy float64 naive *is* the oracle (cuflash.oracle calls it in float64),
so test_oracle.py checks the oracle against an independent definition.
"""
import numpy as np
import pytest

import cuflash
from cuflash._xp import accum_dtype, dtype_name
from cuflash.oracle import (normwise_error, oracle_attention, oracle_backward, rel_error,
                            scale_bias)

from helpers import poison_gpu_outputs  # noqa: F401 (autouse fixture)
from helpers import ALL_DTYPES, UNIT_ROUNDOFF, grad_scale, make_inputs, randn

#: Bounds of the naive path, in units of the dtype's u: out and gradients (max relative to
#: max |oracle|, or to the largest gradient for dq, dk, dv), and lse (relative to max |lse|).
NAIVE_BOUNDS = {
    "16-bit": {"max": 12.0, "normwise": 6.0, "bias": 4.0, "lse_max": 3.0, "lse_bias": 0.3},
    "float32": {"max": 100.0, "normwise": 40.0, "bias": 8.0, "lse_max": 32.0, "lse_bias": 8.0},
    "float64": {"max": 100.0, "normwise": 40.0, "bias": 8.0, "lse_max": 32.0, "lse_bias": 8.0},
}

SHAPES = [(1, 97, 16), (97, 17, 64), (97, 257, 64), (257, 257, 32), (257, 97, 128)]


def _bounds(dtype):
    name = dtype_name(dtype)
    return UNIT_ROUNDOFF[name], NAIVE_BOUNDS["16-bit" if name in ("float16", "bfloat16") else name]


def _check(name, got, ref, u, b, floor_scale=None):
    m = float(np.abs(ref).max())
    scale = m if floor_scale is None else max(m, floor_scale)
    err = rel_error(got, ref) * (m / scale if m > 0 else 1.0)
    assert err <= b["max"] * u, f"{name}: max error {err / u:.2f} u > {b['max']} u"
    if m < scale / 64:
        return
    nw, bias = normwise_error(got, ref), abs(scale_bias(got, ref))
    assert nw <= b["normwise"] * u, f"{name}: normwise error {nw / u:.2f} u > {b['normwise']} u"
    assert bias <= b["bias"] * u, f"{name}: |bias| {bias / u:.2f} u > {b['bias']} u"


def _id(shape):
    return "T{}_S{}_d{}".format(*shape)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_naive_forward_close_to_oracle(xp, shape, dtype, causal):
    T, S, d = shape
    q, k, v = make_inputs(xp, (2, T, d), (2, S, d), dtype, seed=60 + SHAPES.index(shape))
    ref_out, ref_lse = oracle_attention(q, k, v, causal=causal)
    out, lse = cuflash.naive_attention(q, k, v, causal=causal, return_lse=True)
    assert out.dtype == np.dtype(dtype) and lse.dtype == accum_dtype(dtype)
    u, b = _bounds(dtype)
    _check("out", out, ref_out, u, b)
    fin = np.isfinite(ref_lse)
    lse_np = cuflash._xp.to_numpy(lse).astype(np.float64)
    assert np.array_equal(np.isneginf(lse_np), np.isneginf(ref_lse))
    err = rel_error(lse_np, ref_lse)
    bias = abs(scale_bias(lse_np[fin], ref_lse[fin]))
    assert err <= b["lse_max"] * u, f"lse: max error {err / u:.2f} u > {b['lse_max']} u"
    assert bias <= b["lse_bias"] * u, f"lse: |bias| {bias / u:.3f} u > {b['lse_bias']} u"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_naive_backward_close_to_oracle(xp, shape, dtype, causal):
    T, S, d = shape
    seed = 70 + SHAPES.index(shape)
    q, k, v = make_inputs(xp, (2, T, d), (2, S, d), dtype, seed=seed)
    dout = randn(xp, (2, T, d), dtype, seed=seed + 1000)
    refs = oracle_backward(dout, q, k, v, causal=causal)
    grads = cuflash.naive_attention_backward(dout, q, k, v, causal=causal)
    u, b = _bounds(dtype)
    for name, g, x, ref in zip(("dq", "dk", "dv"), grads, (q, k, v), refs):
        assert g.dtype == x.dtype and g.shape == x.shape, name
        _check(name, g, ref, u, b, floor_scale=grad_scale(*refs))
