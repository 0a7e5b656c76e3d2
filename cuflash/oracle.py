"""The float64 oracle every path is checked against: naive attention on NumPy in float64.

Inputs of any dtype and device are first rounded to their own dtype (they already are) and then
converted exactly to float64 on the host, so the oracle answers "what is exact attention of
these very numbers".
"""
from __future__ import annotations

import numpy as np

from ._xp import to_numpy
from .naive import naive_attention, naive_attention_backward


def _f64(x):
    return to_numpy(x).astype(np.float64)


def _options(kw):
    """The attention options with ALiBi slopes in float64 NumPy (a mask_mod evaluates on NumPy
    by itself)."""
    if kw.get("alibi_slopes") is not None:
        kw = dict(kw, alibi_slopes=_f64(kw["alibi_slopes"]))
    return kw


def oracle_attention(q, k, v, *, causal=False, scale=None, **options):
    """(out, lse) in float64 NumPy for inputs on any device and of any dtype. ``options``:
    window, softcap, alibi_slopes, mask_mod, as in :func:`cuflash.attention`."""
    return naive_attention(_f64(q), _f64(k), _f64(v), causal=causal, scale=scale, return_lse=True,
                           **_options(options))


def oracle_backward(dout, q, k, v, *, causal=False, scale=None, **options):
    """(dq, dk, dv) in float64 NumPy: the analytic gradient of exact attention."""
    return naive_attention_backward(_f64(dout), _f64(q), _f64(k), _f64(v), causal=causal,
                                    scale=scale, **_options(options))


def rel_error(x, ref) -> float:
    """max |x - ref| / max |ref| over finite entries (0 if ref is all zero); inf if x has a NaN
    where ref has none."""
    x = _f64(x)
    ref = np.asarray(ref, dtype=np.float64)
    if np.any(np.isnan(x) & ~np.isnan(ref)):
        return float("inf")
    fin = np.isfinite(ref)
    if not fin.any():
        return 0.0
    denom = np.abs(ref[fin]).max()
    err = np.abs(x[fin] - ref[fin]).max()
    return float(err / denom) if denom > 0 else float(err)
