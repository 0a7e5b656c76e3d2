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

from ._xp import array_module


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
        bias = slopes.astype(s.dtype, copy=False) * dist.astype(s.dtype)
        s = (s - bias).astype(s.dtype, copy=False)
    return (s, g) if grad else s
