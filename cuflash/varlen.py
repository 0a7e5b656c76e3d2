"""Variable-length packed batches: :func:`attention_varlen` and :func:`attention_varlen_backward`
(after FlashAttention's ``flash_attn_varlen_func``).

The tokens of every sequence are packed along axis 0, with no padding: q (total_q, Hq, d),
k (total_k, Hkv, d), v (total_k, Hkv, d_v). Sequence b owns query tokens
cu_seqlens_q[b] .. cu_seqlens_q[b+1] - 1 and key tokens cu_seqlens_k[b] .. cu_seqlens_k[b+1] - 1
(int32, batch + 1 entries each). Each sequence is one attention problem of T_b = its query
count and S_b = its key count: causal masks and windows are aligned to its own bottom-right
corner, ALiBi distances are its own, GQA as in :func:`cuflash.attention`.

The CUDA kernels run every sequence of a packed batch in one launch, reading the tokens in
place (the lengths from cu_seqlens: kernels_cu/seq.cuh). The CPU twin runs it here, one group of
sequences of equal (T_b, S_b) at a time (``_groups``): the group's tokens are gathered into
(n, H, T_b, d) arrays (a copy), run through :func:`cuflash.attention` /
:func:`cuflash.attention_backward`, and scattered back. Neither pads to max_seqlen: no score,
row or byte of padding is computed or stored.
"""
from __future__ import annotations

import numpy as np

from . import checks
from ._xp import accum_dtype
from . import api
from .api import Residuals, VarlenResiduals, attention, attention_backward


def _groups(vp):
    """[((T_b, S_b), sequence indices)] for the sequences with T_b > 0, one entry per distinct
    pair of lengths, in order of first appearance. The one loop of the varlen reference path:
    one cuflash.attention call (one launch set on the GPU) per entry."""
    lq, lk = vp.lengths_q, vp.lengths_k
    keys = {}
    for b in np.flatnonzero(lq > 0):
        keys.setdefault((int(lq[b]), int(lk[b])), []).append(int(b))
    return [(key, np.asarray(idx, dtype=np.int64)) for key, idx in keys.items()]


def _rows(cu, idx, L, xp):
    """The packed rows of L tokens of each sequence idx: a slice when there is one sequence,
    else an (n, L) index array on xp."""
    if len(idx) == 1:
        start = int(cu[idx[0]])
        return slice(start, start + L)
    return xp.asarray(cu[idx][:, None] + np.arange(L)[None, :])


def _gather(x, rows):
    """(n, H, L, .) view or copy of the packed (total, H, .) rows (``_rows``): a transposed view
    for one sequence, a gathered copy otherwise (cuflash.attention copies either to
    C-contiguous)."""
    if isinstance(rows, slice):
        return x[rows].transpose(1, 0, 2)[None]
    return x[rows].transpose(0, 2, 1, 3)


def _scatter(dst, rows, g):
    """Write g (n, H, L, .) back into the packed rows of dst (total, H, .)."""
    if isinstance(rows, slice):
        dst[rows] = g[0].transpose(1, 0, 2)
    else:
        dst[rows] = g.transpose(0, 2, 1, 3)


def _gather_lse(lse, rows):
    """(n, Hq, L) of lse (Hq, total_q)."""
    if isinstance(rows, slice):
        return lse[:, rows][None]
    return lse[:, rows].transpose(1, 0, 2)


def _scatter_lse(lse, rows, g):
    if isinstance(rows, slice):
        lse[:, rows] = g[0]
    else:
        lse[:, rows] = g.transpose(1, 0, 2)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k=None, *, max_seqlen_q=None,
                     max_seqlen_k=None, causal=False, scale=None, window=None, softcap=None,
                     alibi_slopes=None, return_lse=False, return_residuals=False, tile=None,
                     precision=None):
    """Exact attention of a packed batch of sequences of different lengths, without padding.

    Parameters
    ----------
    q : array (total_q, Hq, d)
        The queries of every sequence, packed along axis 0 (flash-attn's layout). NumPy (the
        CPU twin) or CuPy (the CUDA kernels); float16, bfloat16, float32 or float64; d from 1 to
        256. Any strides.
    k, v : arrays (total_k, Hkv, d) and (total_k, Hkv, d_v)
        Keys and values, packed the same way; q's dtype and device. Hq must be a multiple of Hkv
        (GQA: query head h reads kv head h // (Hq / Hkv); Hkv = 1 is MQA). d_v may differ from
        d (1 to 256).
    cu_seqlens_q, cu_seqlens_k : int32 arrays (batch + 1,), on q's device
        Where each sequence starts, then the total: sequence b has the query tokens
        cu_seqlens_q[b] .. cu_seqlens_q[b+1] - 1 and the key tokens cu_seqlens_k[b] ..
        cu_seqlens_k[b+1] - 1. Both start at 0, never decrease, and end at q.shape[0] and
        k.shape[0]. Sequences may be empty (no queries: nothing to compute; no keys: out 0 and
        lse -inf for its queries).
        cu_seqlens_q may instead be a :class:`cuflash.SeqLens` of both (cu_seqlens_k left
        out): checked once when it was made, so that this call does not read them back.
        Self-attention: pass one array for both (or ``SeqLens(cu)``). The GPU kernels then read
        that array alone and know each sequence's causal diagonal at compile time, which the
        Hopper causal forward runs ~5% faster (README, "Grouped-query attention and packed
        batches"); two arrays of equal values run the general kernels.
    max_seqlen_q, max_seqlen_k : int, optional
        Bounds on the longest query / key length (flash-attn's arguments), checked to hold
        every real length. Given both with the arrays, the kernels' grid is sized by them and
        the arrays are read back only once the launch is prepared (below); otherwise the grid
        is sized by the real longest lengths. None: taken from cu_seqlens.
    causal, scale, window, softcap
        As in :func:`cuflash.attention`, applied per sequence with T = T_b and S = S_b: causal
        and windows are aligned to each sequence's bottom-right corner (query i sees key j iff
        j <= i + S_b - T_b). scale defaults to 1/sqrt(d).
    alibi_slopes : float32/float64 array, optional
        One slope per query head, of a shape broadcastable to (batch, Hq) ((Hq,) or
        (batch, Hq), flash-attn's two forms); distances per sequence.
    return_lse : bool
        Also return the log-sum-exp of each row's scores.
    return_residuals : bool
        Also return the :class:`cuflash.VarlenResiduals` that
        :func:`attention_varlen_backward` takes.
    tile : TileConfig, optional
        As in :func:`cuflash.attention` (used for every sequence).
    precision : {'ieee', 'tf32', 'highest'} or None
        float32's products, as in :func:`cuflash.attention` (``cuflash.precision``).

    Returns
    -------
    out : array (total_q, Hq, d_v), q's dtype, new and C-contiguous, packed as q.
    lse : array (Hq, total_q), float32 (float64 for float64 inputs): flash-attn's varlen
        convention (heads first, then the packed query tokens); only with ``return_lse``.
    residuals : VarlenResiduals; only with ``return_residuals`` (after lse when both are asked).

    Cost beyond the kernels: cu_seqlens are read back to the host to be checked, a device sync
    on CuPy that leaves the GPU idle between calls (none with a :class:`cuflash.SeqLens`, and
    none in the backward of these residuals, which keep the forward's). Given both max_seqlen
    bounds, the readback waits until the launch is prepared, so the GPU idles for the checks
    and the launch only (``checks._PendingSeqLens``; NOTES v21); on the CPU twin, one
    :func:`cuflash.attention` call per group of sequences with the same (T_b, S_b)
    (``_groups``), tokens gathered and scattered (copies).
    """
    vp = checks.check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                             max_seqlen_k=max_seqlen_k, causal=causal, scale=scale,
                             window=window, softcap=softcap, alibi_slopes=alibi_slopes)
    tile, prec = api._forward_tile(vp, tile, precision)
    checks.check_bool("return_lse", return_lse)
    checks.check_bool("return_residuals", return_residuals)
    xp = vp.xp
    ops = api._backend(xp)
    if ops is not None:   # the kernels: every sequence in one launch, tokens read in place
        out, lse = ops.forward_packed(q, k, v, vp, tile=tile)
    else:
        out = xp.empty((vp.total_q, vp.Hq, vp.dv), dtype=vp.dtype)
        lse = xp.empty((vp.Hq, vp.total_q), dtype=accum_dtype(vp.dtype))
    if vp.Hq and ops is None:
        opts = vp.options()
        for (T, S), idx in _groups(vp):
            rq, rk = _rows(vp.cu_q, idx, T, xp), _rows(vp.cu_k, idx, S, xp)
            slopes = None if vp.alibi_slopes is None else vp.alibi_slopes[xp.asarray(idx)]
            o, l = attention(_gather(q, rq), _gather(k, rk), _gather(v, rk), tile=tile,
                             alibi_slopes=slopes, return_lse=True,
                             precision=None if prec == "native" else prec, **opts)
            _scatter(out, rq, o)
            _scatter_lse(lse, rq, l)
    # a call that read no length (no query heads: nothing launched, no group gathered) still
    # checks cu_seqlens (a no-op where the launch or the groups already did)
    vp.lens.resolve()
    res = VarlenResiduals(q, k, v, out, lse, causal=causal, scale=scale, window=window,
                          softcap=softcap, alibi_slopes=alibi_slopes, cu_seqlens_q=cu_seqlens_q,
                          cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                          max_seqlen_k=max_seqlen_k, seqlens=vp.lens)
    if not (return_lse or return_residuals):
        return out
    return (out,) + ((lse,) if return_lse else ()) + ((res,) if return_residuals else ())


def attention_varlen_backward(dout, residuals, *, tile=None, deterministic=True, precision=None):
    """Gradients of ``sum(dout · attention_varlen(q, k, v, ...))`` with respect to q, k and v.

    Parameters
    ----------
    dout : array (total_q, Hq, d_v)
        Gradient of the output, q's dtype and device.
    residuals : VarlenResiduals
        ``attention_varlen(..., return_residuals=True)``'s, or built by hand
        (``cuflash.VarlenResiduals(q, k, v, out, lse, cu_seqlens_q=..., cu_seqlens_k=...,
        causal=...)``, lse (Hq, total_q)).
    tile, deterministic, precision
        As in :func:`cuflash.attention_backward`.

    Returns
    -------
    dq, dk, dv : new C-contiguous arrays shaped and typed like q, k and v (under GQA dk, dv are
        summed over the query heads of each group; keys of a sequence without queries get 0).

    Cost: as :func:`attention_varlen` (the twin per group of equal (T_b, S_b); the kernels in
    one launch set).
    """
    if not isinstance(residuals, VarlenResiduals):
        raise TypeError(
            "attention_varlen_backward(dout, residuals, *, tile=None, deterministic=True, "
            "precision=None) takes "
            "the VarlenResiduals of attention_varlen(..., return_residuals=True) (or "
            "cuflash.VarlenResiduals(q, k, v, out, lse, cu_seqlens_q=..., cu_seqlens_k=..., "
            f"...)); got {type(residuals).__name__} (a dense Residuals goes to "
            f"cuflash.attention_backward)")
    r = residuals
    if r.mask_mod is not None:
        raise ValueError("VarlenResiduals.mask_mod must be None: attention_varlen takes no mask_mod")
    vp = checks.check_varlen(r.q, r.k, r.v, **r.options())
    tile = checks.check_tile(tile)
    checks.check_bool("deterministic", deterministic)
    xp, dt = vp.xp, vp.dtype
    full = (vp.total_q, vp.Hq, vp.dv)
    checks.check_same("dout", dout, "the output", full, dt, xp)
    checks.check_same("out", r.out, "the forward's output", full, dt, xp)
    checks.check_same("lse", r.lse, "the forward's lse (Hq, total_q)", (vp.Hq, vp.total_q),
                      accum_dtype(dt), xp)
    ops = api._backend(xp)
    # precision and the tile's dtype checked here on both paths (the twin's groups check them
    # again, but a batch without queries has no group)
    chosen, det, _ = api._backward_choice(vp, tile, deterministic, precision)
    if ops is not None:
        return ops.backward_packed(dout, r.q, r.k, r.v, r.out, r.lse, vp, tile=chosen,
                                   deterministic=det)
    dq = xp.zeros(r.q.shape, dtype=dt)
    dk = xp.zeros(r.k.shape, dtype=dt)
    dv = xp.zeros(r.v.shape, dtype=dt)
    if vp.Hq:
        opts = vp.options()
        for (T, S), idx in _groups(vp):
            rq, rk = _rows(vp.cu_q, idx, T, xp), _rows(vp.cu_k, idx, S, xp)
            slopes = None if vp.alibi_slopes is None else vp.alibi_slopes[xp.asarray(idx)]
            res = Residuals(_gather(r.q, rq), _gather(r.k, rk), _gather(r.v, rk),
                            _gather(r.out, rq), _gather_lse(r.lse, rq), alibi_slopes=slopes,
                            **opts)
            g = attention_backward(_gather(dout, rq), res, tile=tile,
                                   deterministic=bool(deterministic), precision=precision)
            _scatter(dq, rq, g[0])
            _scatter(dk, rk, g[1])
            _scatter(dv, rk, g[2])
    return dq, dk, dv


__all__ = ["attention_varlen", "attention_varlen_backward"]
