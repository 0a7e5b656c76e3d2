"""Naive (materialized) attention: the T×S score matrix is written to memory and read back.

This is the baseline of every experiment and, in float64 on NumPy, the oracle of every test
(``cuflash.oracle``). It runs in the input's own array module (NumPy or CuPy) and precision: each
step's result is rounded to the input dtype, as a framework's eager ops would do. On NumPy
(16-bit) and for bfloat16 on CuPy, matrix products are computed in float32 and rounded, as cuBLAS
does with float32 accumulation.

Memory traffic per step is written beside it for B·T·S scores of `e` bytes each (``iomodel``
counts the same passes).
"""
from __future__ import annotations

import numpy as np

from . import checks, precision as _precision, scores
from ._xp import accum_dtype, dtype_name


def _matmul(a, b, xp, prec="native"):
    # NumPy has no fast 16-bit matmul, and CuPy 14.2's batched matmul sends bfloat16 to its
    # integer kernels: both multiply in float32 and round, as cuBLAS does with float32 sums.
    # float32 in TF32 ('tf32', 'highest'): cuflash.precision's roundings of the operands.
    if prec in ("tf32", "highest"):
        return _precision.matmul(a, b, prec, xp)
    if a.dtype.itemsize < 4 and (xp is np or dtype_name(a.dtype) == "bfloat16"):
        return (a.astype(np.float32) @ b.astype(np.float32)).astype(a.dtype)
    out = a @ b
    return out.astype(a.dtype, copy=False)


def _visible(problem, xp, lead):
    """(lead..., T, S) or (T, S) bool of the pairs the mask shows (band and mask_mod)."""
    T, S = problem.T, problem.S
    seen = problem.mask.visible_matrix(T, S, xp)
    if problem.mask_mod is not None:
        bz = xp.arange(problem.batch).reshape(lead + (1, 1))
        seen = seen & problem.mask_mod.evaluate(bz // problem.heads, bz % problem.heads,
                                                xp.arange(T)[:, None], xp.arange(S)[None, :], xp=xp)
    return seen


def _grouped(q, k, v, problem):
    """GQA without copies: q (..., Hq, T, d) as (..., Hkv, G, T, d) and k, v (..., Hkv, S, .) as
    (..., Hkv, 1, S, .), so that query head h = kv·G + g meets kv head kv = h // G by
    broadcasting; with the leading dims of that view (the flattened batch order is unchanged).
    Without GQA: the arrays and the problem's leading dims as they are."""
    G = problem.group
    if G == 1:
        return q, k, v, problem.lead
    hkv = problem.heads // G
    qg = q.reshape(tuple(q.shape[:-3]) + (hkv, G) + tuple(q.shape[-2:]))
    kg, vg = (x[..., None, :, :] if x.ndim >= 3 else x for x in (k, v))
    return qg, kg, vg, problem.lead[:-1] + (hkv, G)


def _ungrouped(x, problem, tail: int):
    """An array of the grouped view (..., Hkv, G, <tail axes>) back to (..., Hq, <tail axes>)."""
    if problem.group == 1:
        return x
    n = x.ndim - tail
    return x.reshape(tuple(x.shape[:n - 2]) + (x.shape[n - 2] * x.shape[n - 1],)
                     + tuple(x.shape[n:]))


def _probabilities(q, k, problem, grad=False, lead=None, prec="native"):
    """Materialized softmax(scores) with its lse; (…, T, S) in q's dtype and (…, T) lse; with
    ``grad`` also d s_out / d s_in of the softcap (None without one). The scores are
    score_mod(scale · q kᵀ) (``cuflash.scores``) with -inf where the mask hides them. ``lead``:
    the leading dims q, k broadcast to (the GQA view's, ``_grouped``); default the problem's.
    ``prec``: float32's precision of q kᵀ (``cuflash.precision``).

    In-place steps keep the peak at one T×S matrix (two when masked). ``iomodel.naive_forward``
    counts the passes written beside each line (TS = B·T·S elements of e bytes) for dense and
    band masks without score modifiers; softcap, ALiBi and mask_mod add passes it does not count.
    """
    xp, dt = problem.xp, q.dtype
    acc = accum_dtype(dt)
    neg_inf = xp.asarray(-np.inf, dtype=dt)
    grouped = lead is not None and problem.group > 1
    lead = problem.lead if lead is None else tuple(lead)
    if problem.S == 0:   # no key at all: every row sees none (P is empty, lse = -inf)
        if not grouped and q.ndim >= k.ndim:
            lead = q.shape[:-2]
        p, lse = (xp.zeros(tuple(lead) + (problem.T, 0), dtype=dt),
                  xp.full(tuple(lead) + (problem.T,), -np.inf, dtype=acc))
        return (p, lse, None) if grad else (p, lse)
    s = _matmul(q, xp.swapaxes(k, -1, -2), xp, prec)    # read q, k; write TS
    s *= xp.asarray(problem.scale, dtype=dt)            # read TS, write TS
    g = None
    if problem.softcap is not None or problem.alibi_slopes is not None:
        slopes = (None if problem.alibi_slopes is None
                  else problem.alibi_slopes.reshape(lead + (1, 1)))
        s, g = scores.modify(s, xp.arange(problem.T)[:, None], xp.arange(problem.S)[None, :],
                             problem.T, problem.S, softcap=problem.softcap, slopes=slopes,
                             grad=True)
    if not problem.mask.dense or problem.mask_mod is not None:
        # read TS (+ T·S mask bytes), write TS
        s = xp.where(_visible(problem, xp, lead), s, neg_inf).astype(dt, copy=False)
    m = s.max(axis=-1, keepdims=True)                   # read TS
    s -= xp.where(m == neg_inf, xp.zeros_like(m), m)    # read TS, write TS (rows with no key: m=-inf)
    p = xp.exp(s, out=s)                                # read TS, write TS
    l = p.sum(axis=-1, keepdims=True, dtype=acc)        # read TS
    p /= xp.where(l == 0, xp.ones_like(l), l).astype(dt)  # read TS, write TS
    with np.errstate(divide="ignore"):
        lse = (m.astype(acc) + xp.log(l))[..., 0]       # -inf where the row sees no key
    return (p, lse, g) if grad else (p, lse)


def naive_attention(q, k, v, *, causal=False, scale=None, return_lse=False, window=None,
                    softcap=None, alibi_slopes=None, mask_mod=None, precision=None):
    """softmax(scores) v with the T×S matrices written out.

    q: (..., Hq, T, d); k, v: (..., Hkv, S, d) and (..., Hkv, S, d_v) -> out: (..., T, d_v) in
    q's dtype; lse (..., T) float32 (float64 for float64 inputs) when ``return_lse``. Arguments
    as in :func:`cuflash.attention` (GQA by broadcasting a view, without copying K/V);
    ``precision`` (float32): both products computed as ``cuflash.precision`` says ('tf32': the
    reference of that mode's error).
    """
    problem = checks.check_qkv(q, k, v, causal=causal, scale=scale, window=window,
                               softcap=softcap, alibi_slopes=alibi_slopes, mask_mod=mask_mod)
    prec = _precision.check(precision, problem.dtype)
    xp = problem.xp
    q, k, v, lead = _grouped(q, k, v, problem)
    p, lse = _probabilities(q, k, problem, lead=lead, prec=prec)
    out = _matmul(p, v, xp, prec)                            # read T·S·e + S·d, write T·d
    out, lse = _ungrouped(out, problem, 2), _ungrouped(lse, problem, 1)
    # q alone may have fewer leading dims than the broadcast: only then are out and lse
    # broadcast views (each checked: with no key, lse has q's leading dims while P V broadcast)
    if out.shape != problem.lead + (problem.T, problem.dv):
        out = xp.broadcast_to(out, problem.lead + (problem.T, problem.dv))
    if lse.shape != problem.lead + (problem.T,):
        lse = xp.broadcast_to(lse, problem.lead + (problem.T,))
    return (out, lse) if return_lse else out


def naive_attention_backward(dout, q, k, v, *, causal=False, scale=None, window=None,
                             softcap=None, alibi_slopes=None, mask_mod=None, precision=None):
    """Gradients (dq, dk, dv) of ``sum(dout · naive_attention(q, k, v, ...))``, materialized.

    dout: (..., T, d_v) like the output. Returns arrays shaped like q, k, v (summed over
    broadcast leading dims, and under GQA over each group's query heads), in their dtype. The
    T×S probabilities and their gradient are written out. Options as in
    :func:`naive_attention`; ``precision`` (float32): all five products (the recomputed scores,
    dV, dP, dQ, dK) computed as ``cuflash.precision`` says.
    """
    problem = checks.check_qkv(q, k, v, causal=causal, scale=scale, window=window,
                               softcap=softcap, alibi_slopes=alibi_slopes, mask_mod=mask_mod)
    prec = _precision.check(precision, problem.dtype)
    xp, dt = problem.xp, q.dtype
    checks.check_same("dout", dout, "the output", problem.lead + (problem.T, problem.dv), dt, xp)
    q_in, k_in, v_in = q, k, v
    q, k, v, lead = _grouped(q, k, v, problem)
    if problem.group > 1:
        dout = dout.reshape(lead + tuple(dout.shape[-2:]))
    p, _, g = _probabilities(q, k, problem, grad=True, lead=lead, prec=prec)   # the forward's
    dv = _matmul(xp.swapaxes(p, -1, -2), dout, xp, prec)  # read TS, dout; write dv
    dp = _matmul(dout, xp.swapaxes(v, -1, -2), xp, prec)  # read dout, v; write TS
    acc = accum_dtype(dt)
    D = (p * dp).sum(axis=-1, keepdims=True, dtype=acc)  # read 2 TS, write TS, read TS
    dp -= D.astype(dt)                                   # read TS, write TS
    dp *= p                                              # read 2 TS, write TS: dS = P ∘ (dP - D)
    if g is not None:
        dp *= g                                          # softcap: · d s_out / d s_in
    dp *= xp.asarray(problem.scale, dtype=dt)            # read TS, write TS
    dq = _matmul(dp, k, xp, prec)                        # read TS, k; write dq
    dk = _matmul(xp.swapaxes(dp, -1, -2), q, xp, prec)   # read TS, q; write dk
    if problem.group > 1:   # GQA: sum each group's G query heads (axis -3 of the view)
        dq = _ungrouped(dq, problem, 2)
        dk, dv = (x.astype(acc).sum(axis=-3).astype(dt) for x in (dk, dv))
    return (checks.unbroadcast(dq, q_in.shape, xp), checks.unbroadcast(dk, k_in.shape, xp),
            checks.unbroadcast(dv, v_in.shape, xp))


# -- variable-length packed batches: one sequence at a time ------------------------------------

def _sequences(vp):
    """(b, q rows, k rows) of every sequence with at least one query token."""
    for b in range(vp.batch):
        q0, q1, k0, k1 = (int(x) for x in (vp.cu_q[b], vp.cu_q[b + 1], vp.cu_k[b], vp.cu_k[b + 1]))
        if q1 > q0:
            yield b, slice(q0, q1), slice(k0, k1)


def _heads_first(x, rows, xp):
    """(H, L, .) view of the packed rows of x (total, H, .)."""
    return xp.swapaxes(x[rows], 0, 1)


def naive_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k=None, *, max_seqlen_q=None,
                           max_seqlen_k=None, causal=False, scale=None, window=None,
                           softcap=None, alibi_slopes=None, return_lse=False, precision=None):
    """:func:`cuflash.attention_varlen` materialized, one sequence at a time: out
    (total_q, Hq, d_v) and, with ``return_lse``, lse (Hq, total_q). Arguments as there
    (``precision``: float32's products, as :func:`naive_attention` takes it)."""
    vp = checks.check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                             max_seqlen_k=max_seqlen_k, causal=causal, scale=scale,
                             window=window, softcap=softcap, alibi_slopes=alibi_slopes)
    _precision.check(precision, vp.dtype)
    xp, dt = vp.xp, vp.dtype
    out = xp.zeros((vp.total_q, vp.Hq, vp.dv), dtype=dt)
    lse = xp.full((vp.Hq, vp.total_q), -np.inf, dtype=accum_dtype(dt))
    if vp.Hq:
        for b, rq, rk in _sequences(vp):
            o, l = naive_attention(_heads_first(q, rq, xp), _heads_first(k, rk, xp),
                                   _heads_first(v, rk, xp), causal=causal, scale=vp.scale,
                                   window=window, softcap=softcap, return_lse=True,
                                   alibi_slopes=None if vp.alibi_slopes is None
                                   else vp.alibi_slopes[b], precision=precision)
            out[rq] = xp.swapaxes(o, 0, 1)
            lse[:, rq] = l
    return (out, lse) if return_lse else out


def naive_attention_varlen_backward(dout, q, k, v, cu_seqlens_q, cu_seqlens_k=None, *,
                                    max_seqlen_q=None, max_seqlen_k=None, causal=False,
                                    scale=None, window=None, softcap=None, alibi_slopes=None,
                                    precision=None):
    """Gradients (dq, dk, dv) of ``sum(dout · naive_attention_varlen(q, k, v, ...))``, shaped
    like q, k, v, one sequence at a time (keys of sequences without queries get 0);
    ``precision`` as :func:`naive_attention_backward` takes it."""
    vp = checks.check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                             max_seqlen_k=max_seqlen_k, causal=causal, scale=scale,
                             window=window, softcap=softcap, alibi_slopes=alibi_slopes)
    xp, dt = vp.xp, vp.dtype
    _precision.check(precision, dt)
    checks.check_same("dout", dout, "the output", (vp.total_q, vp.Hq, vp.dv), dt, xp)
    dq, dk, dv = (xp.zeros(x.shape, dtype=dt) for x in (q, k, v))
    if vp.Hq:
        for b, rq, rk in _sequences(vp):
            grads = naive_attention_backward(
                _heads_first(dout, rq, xp), _heads_first(q, rq, xp), _heads_first(k, rk, xp),
                _heads_first(v, rk, xp), causal=causal, scale=vp.scale, window=window,
                softcap=softcap,
                alibi_slopes=None if vp.alibi_slopes is None else vp.alibi_slopes[b],
                precision=precision)
            for dst, rows, g in zip((dq, dk, dv), (rq, rk, rk), grads):
                dst[rows] = xp.swapaxes(g, 0, 1)
    return dq, dk, dv
