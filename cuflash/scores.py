"""What happens to a score between q·kᵀ and the softmax: the one rule of cuflash for the twin,
naive and the float64 oracle (the kernels read the same from ``kernels_cu/score.cuh``).

With s = scale · q·k of query i and key j (T queries, S keys):

    softcap c > 0:   s <- c · tanh(s / c)                    (Gemma-2's logit soft-capping)
    ALiBi slope m:   s <- s - m · |i + S - T - j|            (FlashAttention-2's alibi_slopes)

in that order, then the mask (``cuflash.mask``) and the softmax. The backward needs
d s_out / d s_in = 1 - tanh²(s / c) with softcap (1 without): dS of the raw scores is the
softmax's dS times it.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from ._xp import accum_dtype, array_module, dtype_name


def check_softcap(softcap) -> float | None:
    """None (no cap) or a finite float > 0."""
    if softcap is None:
        return None
    if isinstance(softcap, bool) or not isinstance(softcap, numbers.Real):
        raise TypeError(f"softcap must be a real number > 0 or None, got {softcap!r}")
    c = float(softcap)
    if not math.isfinite(c) or c <= 0:
        raise ValueError(f"softcap={softcap!r} must be finite and > 0 (or None for no cap)")
    return c


def check_alibi(alibi_slopes, lead: tuple, dtype, xp):
    """ALiBi slopes broadcast to the leading dims and flattened: (batch,) in the accumulation
    dtype (float32; float64 for float64 inputs) on the inputs' device, or None.

    ``alibi_slopes``: a float array of the inputs' array module whose shape broadcasts to the
    leading dims ``lead`` of the problem (one slope per head: shape (H,) for (B, H, T, d)
    inputs), finite."""
    if alibi_slopes is None:
        return None
    try:
        mod = array_module(alibi_slopes=alibi_slopes)
    except TypeError:
        raise TypeError(f"alibi_slopes must be a float array of shape broadcastable to the "
                        f"leading dims {tuple(lead)}, got {type(alibi_slopes).__name__}") from None
    if mod is not xp:
        raise TypeError("alibi_slopes is on a different device from q, k, v")
    if alibi_slopes.dtype.kind != "f" or dtype_name(alibi_slopes.dtype) not in ("float32", "float64"):
        raise TypeError(f"alibi_slopes must be float32 or float64, got {dtype_name(alibi_slopes.dtype)}")
    try:
        full = xp.broadcast_to(alibi_slopes, tuple(lead))
    except ValueError:
        raise ValueError(f"alibi_slopes of shape {tuple(alibi_slopes.shape)} does not broadcast "
                         f"to the leading dims {tuple(lead)} of q, k, v (one slope per head: "
                         f"shape (heads,) for (batch, heads, T, d) inputs)") from None
    if not bool(xp.isfinite(alibi_slopes).all()):
        raise ValueError("alibi_slopes must be finite")
    acc = accum_dtype(dtype)
    return xp.ascontiguousarray(full.astype(acc, copy=False)).reshape(-1)


def modify(s, i, j, T: int, S: int, *, softcap=None, slopes=None, grad=False):
    """The scores ``s`` (natural units, already scaled) of queries i and keys j (index arrays
    broadcasting against s's last two dims) after softcap and ALiBi, in s's dtype; with
    ``grad=True`` also d s_out / d s_in (None when there is no softcap). ``slopes`` broadcasts
    against s's leading dims (e.g. (B, 1, 1))."""
    g = None
    if softcap is not None:
        c = s.dtype.type(softcap)
        t = array_module(s=s).tanh(s / c)
        s = (t * c).astype(s.dtype, copy=False)
        if grad:
            g = (1 - t * t).astype(s.dtype, copy=False)
    if slopes is not None:
        dist = abs(i + (S - T) - j)
        s = (s - slopes.astype(s.dtype, copy=False) * dist.astype(s.dtype)).astype(s.dtype, copy=False)
    return (s, g) if grad else s
