"""The exact log-sum-exp merge of attention over disjoint key blocks.

Attention of one query row over keys K = K_1 ∪ K_2 ∪ ... (disjoint) from the attention of the
row over each block alone: with out_b = Σ_{j∈K_b} p_j v_j / Σ_{j∈K_b} p_j and
lse_b = log Σ_{j∈K_b} exp(s_j),

    lse = log Σ_b exp(lse_b)              out = Σ_b exp(lse_b - lse) · out_b

which is exact arithmetic, not an approximation (FlashAttention's own rescaling, one level up).
Computed with m = max_b lse_b subtracted first, every weight is in [0, 1] and their sum in
[1, number of blocks], so nothing overflows; ``lse = m + log(sum)``. A row that saw no key in a
block has lse_b = -inf and out_b = 0 there: weight exactly 0. A row that saw no key in any block
keeps lse = -inf and out = 0, as ``cuflash.attention`` gives it. Sums run in float32 (float64
for float64 inputs), whatever the dtype of the partial outputs.

The backward needs no merge of its own: with the *merged* out and lse of a row, key block b's
share of the gradients is exactly what ``cuflash.attention_backward`` computes from
``Residuals(q, k_b, v_b, out, lse)`` — it recomputes P_b = exp(s - lse) (the global
probabilities of the keys in K_b) and D = rowsum(dO ∘ out), so dq = Σ_b dq_b, and dk_b, dv_b are
the gradients of the keys in K_b.
"""
from __future__ import annotations

import numpy as np

from .._xp import array_module


def _acc(*dtypes):
    """float64 if any array is float64, else float32."""
    return np.dtype(np.float64) if any(np.dtype(d) == np.float64 for d in dtypes) \
        else np.dtype(np.float32)


def _check(name_o, out, name_l, lse):
    if tuple(out.shape[:-1]) != tuple(lse.shape):
        raise ValueError(f"{name_o} of shape {tuple(out.shape)} and {name_l} of shape "
                         f"{tuple(lse.shape)} do not match: {name_o} is (..., T, d) and "
                         f"{name_l} (..., T)")


def merge_all(outs, lses):
    """(out, lse) of attention over the union of disjoint key blocks, from each block's.

    outs : list of arrays (..., T, d), any float dtype (rows with no key in the block: 0);
    lses : list of arrays (..., T) (float32 or float64; -inf where the row saw no key).
    Returns out (..., T, d) and lse (..., T) in float32 (float64 if any input is float64).
    """
    outs, lses = list(outs), list(lses)
    if not outs or len(outs) != len(lses):
        raise ValueError(f"merge_all needs one lse per output and at least one block; got "
                         f"{len(outs)} outputs and {len(lses)} lse arrays")
    for b, (o, l) in enumerate(zip(outs, lses)):
        _check(f"outs[{b}]", o, f"lses[{b}]", l)
        if tuple(o.shape) != tuple(outs[0].shape):
            raise ValueError(f"outs[{b}] has shape {tuple(o.shape)}, outs[0] "
                             f"{tuple(outs[0].shape)}")
    xp = array_module(**{f"outs{b}": o for b, o in enumerate(outs)},
                      **{f"lses{b}": l for b, l in enumerate(lses)})
    acc = _acc(*(o.dtype for o in outs), *(l.dtype for l in lses))
    ls = [l.astype(acc, copy=False) for l in lses]
    m = ls[0]
    for l in ls[1:]:
        m = xp.maximum(m, l)
    none = m == -np.inf
    m_safe = xp.where(none, acc.type(0), m)
    ws = [xp.exp(l - m_safe) for l in ls]            # exp(-inf) = 0: blocks the row did not see
    total = ws[0]
    for w in ws[1:]:
        total = total + w
    inv = xp.where(none, acc.type(0), acc.type(1) / xp.where(none, acc.type(1), total))
    out = None
    for w, o in zip(ws, outs):
        term = (w * inv)[..., None] * o.astype(acc, copy=False)
        out = term if out is None else out + term
    lse = xp.where(none, acc.type(-np.inf), m_safe + xp.log(xp.where(none, acc.type(1), total)))
    return out, lse


def merge_partials(out_a, lse_a, out_b, lse_b):
    """(out, lse) of two disjoint key blocks merged: :func:`merge_all` of two, written as the
    running update of the ring, ``lse = m + log1p(exp(min - m))``, m the larger lse (log1p keeps
    a small second weight exact to float32 rounding).

    out_a, out_b : (..., T, d); lse_a, lse_b : (..., T). Returns float32 (float64) arrays.
    """
    _check("out_a", out_a, "lse_a", lse_a)
    _check("out_b", out_b, "lse_b", lse_b)
    xp = array_module(out_a=out_a, lse_a=lse_a, out_b=out_b, lse_b=lse_b)
    acc = _acc(out_a.dtype, lse_a.dtype, out_b.dtype, lse_b.dtype)
    la, lb = lse_a.astype(acc, copy=False), lse_b.astype(acc, copy=False)
    hi, lo = xp.maximum(la, lb), xp.minimum(la, lb)
    none = hi == -np.inf
    hi_safe = xp.where(none, acc.type(0), hi)
    small = xp.exp(lo - hi_safe)                      # the lesser weight, in [0, 1]; 0 if unseen
    inv = acc.type(1) / (acc.type(1) + small)
    a_big = la >= lb
    wa = xp.where(none, acc.type(0), xp.where(a_big, inv, small * inv))
    wb = xp.where(none, acc.type(0), xp.where(a_big, small * inv, inv))
    out = (wa[..., None] * out_a.astype(acc, copy=False)
           + wb[..., None] * out_b.astype(acc, copy=False))
    lse = xp.where(none, acc.type(-np.inf), hi_safe + xp.log1p(small))
    return out, lse


def merge_into(out_acc, lse_acc, out_b, lse_b, rows=slice(None)):
    """In place: rows ``rows`` of the running (out_acc (..., T, d), lse_acc (..., T)), both float32
    (float64), become their merge with a block's (out_b, lse_b) for those rows."""
    o, l = merge_partials(out_acc[..., rows, :], lse_acc[..., rows], out_b, lse_b)
    out_acc[..., rows, :] = o
    lse_acc[..., rows] = l


__all__ = ["merge_all", "merge_partials", "merge_into"]
