"""Test helpers: seeded inputs on either array module, and the oracle pass criterion
err(got) <= 2 · err(naive in the same precision) + floor(dtype)."""
from __future__ import annotations

import numpy as np
import pytest

from cuflash._xp import bfloat16, dtype_name, to_numpy
from cuflash.oracle import rel_error

#: Absolute slack added to 2 · err(naive), per dtype (a few units in the last place relative to
#: the largest output entry): it only matters where the naive error happens to be ~0, e.g. the
#: float64 naive path, which *is* the oracle.
FLOORS = {"float64": 1e-12, "float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}

_NO_BF16 = pytest.mark.skipif(bfloat16 is None, reason="ml_dtypes not installed (no bfloat16)")

#: dtype parameters with short ids; bfloat16 is skipped without ml_dtypes.
DTYPES = {"float16": np.dtype(np.float16), "bfloat16": bfloat16,
          "float32": np.dtype(np.float32), "float64": np.dtype(np.float64)}
SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64"}


def dtype_param(name):
    """A pytest.param for the dtype called `name` (e.g. 'bfloat16'), id like 'bf16'."""
    marks = [_NO_BF16] if name == "bfloat16" else []
    return pytest.param(DTYPES[name], id=SHORT[name], marks=marks)


def dtype_case(name, *values, id):
    """A pytest.param of (dtype, *values) with id SHORT[name] + '-' + id (skipped like
    dtype_param)."""
    marks = [_NO_BF16] if name == "bfloat16" else []
    return pytest.param(DTYPES[name], *values, id=f"{SHORT[name]}-{id}", marks=marks)


ALL_DTYPES = [dtype_param(n) for n in ("float16", "bfloat16", "float32", "float64")]


def randn(xp, shape, dtype, seed):
    """Standard-normal array of `shape`, rounded to `dtype`, made with NumPy and moved to `xp`."""
    a = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return xp.asarray(a)


def make_inputs(xp, shape_q, shape_k, dtype, seed):
    """q (shape_q), k and v (shape_k): fresh standard-normal inputs of `dtype` on `xp`."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(shape_q).astype(dtype)
    k = rng.standard_normal(shape_k).astype(dtype)
    v = rng.standard_normal(shape_k).astype(dtype)
    return xp.asarray(q), xp.asarray(k), xp.asarray(v)


def grad_scale(*refs):
    """Largest |entry| over a set of oracle gradients (dq, dk, dv): the ``floor_scale`` of each."""
    return max(float(np.abs(np.asarray(r, dtype=np.float64)).max(initial=0.0)) for r in refs)


def assert_matches_oracle(got, oracle_ref, naive_got, *, dtype, name, floor_scale=None):
    """err(got) <= 2 · err(naive_got) + floor, errors relative to the float64 oracle.

    err is ``cuflash.oracle.rel_error`` (max abs error / max |oracle|). The floor is
    FLOORS[dtype] relative to ``floor_scale`` (default: max |oracle|, i.e. FLOORS[dtype] itself).
    Also: got has the oracle's shape, and -inf (lse of rows that see no key) sits exactly where
    the oracle has it.

    Gradients pass ``floor_scale=grad_scale(dq, dk, dv)``: dq and dk are sums of
    dS = P ∘ (dP - D), and a query row that sees exactly one key has dS = 0 exactly in the naive
    path (P = 1, so its D *is* dP) but rounding-level noise in the tiled path, whose
    D = rowsum(dO ∘ O) comes from the stored, rounded O (as in FlashAttention-2). Where such rows
    dominate dk or dq (S = 1, or causal with S = 2 where the last row's softmax is peaked), dk and
    dq are tiny or exactly 0 and the naive error is no yardstick; the noise is a few units in the
    last place of the *largest* gradient, so the floor is taken relative to that.
    """
    dname = dtype_name(dtype)
    got_np = to_numpy(got)
    ref = np.asarray(oracle_ref, dtype=np.float64)
    assert tuple(got_np.shape) == tuple(ref.shape), \
        f"{name} ({dname}): shape {tuple(got_np.shape)}, oracle {tuple(ref.shape)}"
    got64 = got_np.astype(np.float64)
    bad_inf = np.isneginf(got64) != np.isneginf(ref)
    assert not bad_inf.any(), (f"{name} ({dname}, shape {ref.shape}): -inf at "
                               f"{np.argwhere(bad_inf)[:5].tolist()} differs from the oracle")
    fin = np.isfinite(ref)
    m = float(np.abs(ref[fin]).max(initial=0.0))
    denom = m if m > 0 else 1.0                  # rel_error is absolute when the oracle is all 0
    err = rel_error(got_np, ref)
    err_naive = rel_error(naive_got, ref)
    floor = FLOORS[dname] * (denom if floor_scale is None else max(floor_scale, m)) / denom
    bound = 2 * err_naive + floor
    assert err <= bound, (f"{name} ({dname}, shape {tuple(ref.shape)}): rel. error {err:.3e} > "
                          f"2 × naive error {err_naive:.3e} + floor {floor:.3e} = {bound:.3e}"
                          f" (max |oracle| {m:.3e})")
