"""The float64 oracle every path is checked against: naive attention on NumPy in float64.

Inputs of any dtype and device are first rounded to their own dtype (they already are) and then
converted exactly to float64 on the host, so the oracle answers "what is exact attention of
these very numbers".
"""
from __future__ import annotations

import numpy as np

from ._xp import to_numpy
from .naive import (naive_attention, naive_attention_backward, naive_attention_varlen,
                    naive_attention_varlen_backward)


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


def oracle_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal=False, scale=None,
                            **options):
    """(out (total_q, Hq, d_v), lse (Hq, total_q)) in float64 NumPy of a packed batch
    (:func:`cuflash.attention_varlen`'s arguments), one sequence at a time."""
    return naive_attention_varlen(_f64(q), _f64(k), _f64(v), to_numpy(cu_seqlens_q),
                                  to_numpy(cu_seqlens_k), causal=causal, scale=scale,
                                  return_lse=True, **_options(options))


def oracle_backward_varlen(dout, q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal=False,
                           scale=None, **options):
    """(dq, dk, dv) in float64 NumPy of a packed batch, one sequence at a time."""
    return naive_attention_varlen_backward(_f64(dout), _f64(q), _f64(k), _f64(v),
                                           to_numpy(cu_seqlens_q), to_numpy(cu_seqlens_k),
                                           causal=causal, scale=scale, **_options(options))


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


def _pair(x, ref):
    """(x, ref) as float64 over the entries where ref is finite (1-D)."""
    x = _f64(x)
    ref = np.asarray(ref, dtype=np.float64)
    fin = np.isfinite(ref)
    return x[fin], ref[fin]


def normwise_error(x, ref) -> float:
    """||x - ref||_2 / ||ref||_2 over finite entries of ref (the absolute norm when ref is 0;
    inf if x is not finite where ref is): an average error, which rounding keeps near the unit
    roundoff while a systematic error of every entry shows at its full size."""
    a, r = _pair(x, ref)
    if not np.isfinite(a).all():
        return float("inf")
    err, norm = float(np.linalg.norm(a - r)), float(np.linalg.norm(r))
    return err / norm if norm > 0 else err


def scale_bias(x, ref) -> float:
    """<x - ref, ref> / <ref, ref>: the relative error along ref itself (x = (1 + b)·ref gives b).
    Round-to-nearest errors are uncorrelated with ref and average out; a scaled result does not.
    0 when ref is 0; inf if x is not finite where ref is."""
    a, r = _pair(x, ref)
    if not np.isfinite(a).all():
        return float("inf")
    rr = float(r @ r)
    return float((a - r) @ r) / rr if rr > 0 else 0.0


def row_error(x, ref, tau: float, tiny: float = 0.0) -> float:
    """max over rows (last axis) of ||x_i - ref_i|| / (||ref_i|| + tau · max_i ||ref_i|| +
    tiny · sqrt(n)), n the row length: each row against its own size, so a small row that is
    wrong (a key dropped from the one query that sees it) is not hidden by the largest row; tau
    keeps rows near 0 from dividing by 0. ``tiny`` is the smallest normal number of the dtype x
    was stored in: rounding to a dtype with gradual underflow is fl(y) = y(1 + δ) + η with
    |δ| <= u and |η| <= u · tiny, so a row whose entries lie among the subnormals (float16 below
    6.1e-5) carries up to u · tiny · sqrt(n) of error that its norm does not measure."""
    a, r = _f64(x), np.asarray(ref, dtype=np.float64)
    if a.ndim == 0 or r.size == 0:
        return 0.0
    if not np.isfinite(a).all():
        return float("inf")
    a, r = a.reshape(-1, r.shape[-1]), r.reshape(-1, r.shape[-1])
    err, norm = np.linalg.norm(a - r, axis=-1), np.linalg.norm(r, axis=-1)
    denom = norm + tau * norm.max() + tiny * np.sqrt(r.shape[-1])
    if not denom.max() > 0:
        return float(err.max())
    return float((err / np.where(denom > 0, denom, np.inf)).max())
