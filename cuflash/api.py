"""Public attention functions. NumPy arrays run the CPU twin; CuPy arrays run the CUDA kernels."""
from __future__ import annotations

import dataclasses

import numpy as np

from . import checks, precision as _precision, twin
from ._xp import accum_dtype, dtype_name
from .tile import (check_dtype, default_backward, default_tile, float32_wgmma_pays,
                   wgmma_one_consumer_pays)


def _backend(xp):
    """The module with forward/backward for this array module: the twin, or the GPU ops."""
    if xp is np:
        return None
    from .gpu import ops  # imported only for CuPy arrays
    return ops


def _device(p):
    """(head dim, device keywords) that the default tiles are chosen for: on the GPU, the head
    dim the kernels run at (``Problem.kernel_d``) and the device's shared memory and arch."""
    ops = _backend(p.xp)
    if ops is None:
        return max(p.d, p.dv), {}
    return p.kernel_d, dict(smem_limit=ops.smem_limit(), arch=ops.device_arch())


def _default(p, precision=None, dense=False):
    """Default forward tile for this problem (on the GPU, one that fits the device) in float32's
    ``precision`` (cuflash.precision); ``dense``: a dense batch in one pass (no packed batch,
    KV cache or split-KV), which float32's Hopper warpgroup kernels may run
    (tile.float32_wgmma_pays). The 16-bit forward at d <= 64 keeps its tile of one consumer
    warpgroup for short causal lengths (tile.wgmma_one_consumer_pays), batches that are not
    dense and softcap."""
    d, kw = _device(p)
    staged = dense and float32_wgmma_pays(precision, d, p.S)
    # the forward of three consumer warpgroups runs dense batches without softcap
    # (gpu.plan.copy_engine_only_runs; split-KV runs an 8-warp tile: plan.without_producer)
    short = not dense or p.softcap is not None or \
        wgmma_one_consumer_pays(d, p.T, p.S, p.causal, backward=False)
    return default_tile(d, p.dtype, causal=p.causal, precision=precision, staged=staged,
                        short=short, **kw)


def _forward_tile(p, tile, precision, dense=False):
    """(tile, precision) a forward runs: ``precision`` checked against the dtype
    (cuflash.precision.check) and against the tile's kernel family when a tile is given (with
    precision=None the tile decides: 'tf32', 'highest' for the TF32 families, 'ieee' for the
    others), or the default tile of that precision (``dense`` as ``_default``'s)."""
    prec = _precision.check(precision, p.dtype)
    tile = checks.check_tile(tile)
    if tile is None:
        return _default(p, prec, dense), prec
    check_dtype(tile, p.dtype)
    return tile, _tile_precision(tile, precision, prec)


def _tile_precision(tile, precision, prec):
    """The precision a given tile computes float32 in, checked against the one asked for
    (``precision`` as given, ``prec`` checked; the forward's and the backward's rule)."""
    own = _precision.of_family(tile.kernel)
    if precision is None or _precision.STANDS_IN.get(prec) == own:
        # the tile decides (cuflash.precision.STANDS_IN: 'highest' on a CUDA-core tile)
        prec = own if prec in _precision.PRECISIONS else prec
    elif own != prec:
        raise ValueError(f"precision={prec!r} does not match tile={tile.short()}, whose kernel "
                         f"computes float32 as precision={own!r} (TileConfig.kernel="
                         f"{_precision.FAMILY[prec]!r} computes {prec!r})")
    return prec


def _backward_choice(p, tile, deterministic, precision=None, dense=False):
    """(tile, deterministic, precision) a backward runs: the tile given, its dQ mode as asked
    and the precision it computes (checked as the forward's, ``_forward_tile``), or with
    tile=None ``tile.default_backward``'s choice in float32's ``precision`` (``dense``: a dense
    batch, not a packed one, which float32's Hopper warpgroup backward may run)."""
    tile, deterministic = checks.check_tile(tile), bool(deterministic)
    prec = _precision.check(precision, p.dtype)
    if tile is not None:
        check_dtype(tile, p.dtype)
        return tile, deterministic, _tile_precision(tile, precision, prec)
    d, kw = _device(p)
    staged = dense and float32_wgmma_pays(prec, d, p.S, backward=True)
    short = dense and wgmma_one_consumer_pays(d, p.T, p.S, p.causal, backward=True)
    tile, det = default_backward(d, p.dtype, causal=p.causal, deterministic=deterministic,
                                 precision=None if prec == "native" else prec, staged=staged,
                                 short=short, **kw)
    return tile, det, _tile_precision(tile, None, prec)


def _score_mods(p):
    """The twin's score-modifier arguments of a problem."""
    return dict(softcap=p.softcap, slopes=p.alibi_slopes, mask_mod=p.mask_mod, heads=p.heads)


def _forward(p, q, k, v, tile, num_splits=1, precision="ieee"):
    """out (lead..., T, d_v) and lse (lead..., T): the twin on flattened copies (K/V repeated
    per query head under GQA), or the kernels on the arrays as they are (``gpu.ops``; the tile's
    kernel family computes ``precision``); num_splits: split-KV (None: automatic; the twin takes
    one split then)."""
    ops = _backend(p.xp)
    if ops is not None:
        return ops.forward(q, k, v, p, tile=tile, num_splits=num_splits)
    xp = p.xp
    q3 = checks.flatten(q, p.lead, xp)
    k3, v3 = checks.flatten_kv(k, p, xp), checks.flatten_kv(v, p, xp)
    out3, lse3 = twin.forward(q3, k3, v3, mask=p.mask, scale=p.scale, block_m=tile.block_m,
                              block_n=tile.block_n, num_splits=num_splits or 1,
                              precision=precision, **_score_mods(p))
    return out3.reshape(p.lead + (p.T, p.dv)), lse3.reshape(p.lead + (p.T,))


def _backward(p, dout, q, k, v, out, lse, tile, deterministic, precision="ieee"):
    """(dq, dk, dv) shaped like q, k, v, as _forward (the tile's kernel family computes
    ``precision``)."""
    ops = _backend(p.xp)
    if ops is not None:
        return ops.backward(dout, q, k, v, out, lse, p, tile=tile, deterministic=deterministic)
    xp = p.xp
    q3, do3, o3 = (checks.flatten(x, p.lead, xp) for x in (q, dout, out))
    k3, v3 = checks.flatten_kv(k, p, xp), checks.flatten_kv(v, p, xp)
    lse3 = xp.ascontiguousarray(lse).reshape(p.batch, p.T)
    grads = twin.backward(do3, q3, k3, v3, o3, lse3, mask=p.mask, scale=p.scale,
                          block_m=tile.block_m, block_n=tile.block_n,
                          deterministic=deterministic, precision=precision, **_score_mods(p))
    shapes = (p.lead + (p.T, p.d), p.lead + (p.S, p.d), p.lead + (p.S, p.dv))
    return tuple(checks.unbroadcast(g.reshape(s), x.shape, xp, group)
                 for g, s, x, group in zip(grads, shapes, (q, k, v), (1, p.group, p.group)))


def attention(q, k, v, *, causal=False, scale=None, tile=None, return_lse=False, window=None,
              softcap=None, alibi_slopes=None, mask_mod=None, return_residuals=False,
              num_splits=1, precision=None):
    """Exact attention softmax(scale · q kᵀ) v, tiled: the T×S scores never reach device memory.

    Parameters
    ----------
    q : array (..., Hq, T, d)
        Queries: NumPy (runs the CPU twin) or CuPy (runs the CUDA kernels). float16, bfloat16,
        float32 or float64; any head dim d from 1 to 256 (but float64 on GPUs with 99 KB of
        shared memory a block, sm_86 and sm_89: d up to 224 forward, 160 backward; wider is a
        ValueError saying no tile fits). Any strides (e.g. a (B, T, H, d) array transposed to
        (B, H, T, d)).
    k, v : arrays (..., Hkv, S, d) and (..., Hkv, S, d_v)
        Keys and values, same dtype and device as q. S may differ from T; v's head dim d_v may
        differ from d (1 to 256). Leading dims broadcast against q's as in NumPy, and the head
        axis (-3) may be smaller than q's (GQA): with Hq a multiple of Hkv, query head h reads kv
        head h // (Hq / Hkv), as torch's enable_gqa and FlashAttention (Hkv = 1 is MQA).
    causal : bool
        Mask aligned to the bottom-right corner: query i sees key j iff j <= i + S - T (as in
        FlashAttention-2). With S < T the first T - S queries see no key: their output is 0 and
        their lse is -inf.
    scale : float, optional
        Multiplies q kᵀ; default 1/sqrt(d). Must be > 0 with scale·log2(e) finite in the
        scores' dtype (float32, float64 for float64 inputs). On the GPU every score's
        |scale·q·k|·log2(e) must stay below 2^31 (2^63 in float64: ``checks.logit_limit``);
        beyond, the kernels' exponents overflow and the row is NaN.
    window : (left, right), optional
        Sliding window (FlashAttention-2's window_size): query i sees key j iff
        i + S - T - left <= j <= i + S - T + right; an entry None or -1 is unbounded (and so is
        one of 2^30 or more: ``cuflash.mask.UNBOUNDED``). With
        ``causal`` the window is cut at the diagonal (right = 0). Key tiles wholly outside the
        window are skipped, so the cost grows with T·window. (``cuflash.mask``)
    softcap : float, optional
        Scores s = scale·q·k become softcap·tanh(s / softcap) before the softmax (Gemma-2);
        > 0, with scale / softcap a normal number in the scores' dtype and softcap·log2(e)
        below 2^31 (2^63 in float64), which keeps every capped score within the kernels' range.
    alibi_slopes : array, optional
        ALiBi: scores lose slope·|i + S - T - j|; one float32/float64 slope per (query) head,
        of a shape broadcastable to the leading dims (e.g. (Hq,) for (B, Hq, T, d) queries), on
        q's device. |slope|·(max(T, S) - 1)·log2(e), the bias at the longest distance, must
        stay below 2^31 (2^63 in float64), as the scores must.
    mask_mod : cuflash.MaskMod, optional
        A custom mask (``cuflash.mask_mod``: prefix-LM, documents, dilated patterns...), combined
        with causal and window; tiles it hides whole are skipped. b and h in its expression are
        the indices along the leading axes (h: axis -3, the query head under GQA; b: the axes
        before it, flattened).
    tile : TileConfig, optional
        Tile sizes; default ``default_tile(d, dtype, precision=...)``.
    precision : {'highest', 'tf32', 'ieee'} or None
        How a float32 forward computes its two products (``cuflash.precision``). 'highest' (the
        default, None): on TF32 tensor cores with each operand split in two TF32 numbers and
        three products (3xTF32), float32's accuracy; 'tf32': one TF32 product, each operand
        rounded to a 10-bit mantissa (faster, ~5e-4 relative error, about float16's); 'ieee':
        float32 products on the CUDA cores. 'tf32' and 'highest' run the kernel families 'tf32'
        and 'tf32x3' (sm_80 and later; before, 'highest' runs on the CUDA cores). On sm_90,
        'tf32' with num_splits=1 takes the TF32 wgmma kernel (family 'wgmma_tf32', d <= 128)
        where ``tile.wgmma_tf32_pays`` (d > 64, or from 1024 keys at d <= 64); it stages K and
        Vᵀ rounded to TF32 first, a copy of k and v. The CPU twin computes the same roundings.
        With a tile given and precision None, the tile's family decides ('highest' with a
        CUDA-core tile runs float32 products there). Other dtypes: None only. The backward takes
        its own ``precision`` (:func:`attention_backward`).
    return_lse : bool
        Also return the log-sum-exp of each row's scores (natural log).
    return_residuals : bool
        Also return the :class:`Residuals` that :func:`attention_backward` takes.
    num_splits : int from 1 to 256 (checks.MAX_SPLITS) or None
        Split-KV (flash-decoding): the key tiles of each query tile are shared out over this
        many thread blocks (in order, ceil(tiles / num_splits) each), each leaving its own
        output and log-sum-exp in float, merged exactly by the tile's last block to finish:
        lse = log Σ e^{lse_s}, out = Σ e^{lse_s - lse} out_s. For few queries over many keys
        (decoding), where one block per query tile leaves most of the GPU idle. None chooses
        from the problem and the GPU's SM count; 1 (the default) is the plain kernel. The twin
        runs the same splits and merge. The backward does not depend on it. On the GPU the
        merging block keeps a weight per split in its shared memory: a small explicit tile may
        hold fewer splits than asked (ValueError naming num_splits; None is capped instead).

    Returns
    -------
    out : array (lead..., T, d_v), q's dtype, where lead is the broadcast of the leading dims
        (with Hq heads); a new C-contiguous array whatever the inputs' strides.
    lse : array (lead..., T), float32 (float64 for float64 inputs); only with ``return_lse``.
    residuals : Residuals; only with ``return_residuals`` (after lse when both are asked for).

    The CUDA kernels read q, k and v in place (``cuflash.gpu.views``): any strides whose rows
    start on 16 bytes, broadcasts, GQA's kv heads (no K/V repeated). What they cannot read is
    copied, each case in one place: a misaligned start or a negative stride (a C-contiguous
    copy), and a head dim outside KERNEL_HEAD_DIMS (multiples of 8 from 16 to 256) or
    d_v != d (q, k and v zero-padded to the smallest kernel head dim holding max(d, d_v); the
    output sliced back, another copy). The CPU twin takes any head dim as it is.
    """
    p = checks.check_qkv(q, k, v, causal=causal, scale=scale, window=window, softcap=softcap,
                         alibi_slopes=alibi_slopes, mask_mod=mask_mod)
    return_lse = checks.check_bool("return_lse", return_lse)
    return_residuals = checks.check_bool("return_residuals", return_residuals)
    num_splits = checks.check_num_splits(num_splits)
    tile, prec = _forward_tile(p, tile, precision, dense=num_splits == 1)
    xp = p.xp
    if p.T == 0:
        out = xp.empty(p.lead + (0, p.dv), dtype=p.dtype)
        lse = xp.empty(p.lead + (0,), dtype=accum_dtype(p.dtype))
    else:
        out, lse = _forward(p, q, k, v, tile, num_splits, prec)
    res = (Residuals(q, k, v, out, lse, causal=causal, scale=scale, window=window,
                     softcap=softcap, alibi_slopes=alibi_slopes, mask_mod=mask_mod),)
    return (out,) + ((lse,) if return_lse else ()) + (res if return_residuals else ()) \
        if (return_lse or return_residuals) else out


@dataclasses.dataclass(frozen=True, eq=False)
class Residuals:
    """What the backward needs from a forward: its inputs, output, lse and every setting, in one
    object, so the backward cannot run with settings other than the forward's.

    ``attention(..., return_residuals=True)`` returns one; build one by hand only for arrays that
    did not come from :func:`attention` (e.g. an lse from another implementation). It holds
    references to q, k, v, out and lse, not copies: changing them in place before the backward
    changes the gradients.

    q (..., Hq, T, d), k (..., Hkv, S, d) and v (..., Hkv, S, d_v): the forward's inputs;
    out (lead..., T, d_v) its output; lse (lead..., T) its log-sum-exp (float32; float64 for
    float64 inputs). causal, scale, window, softcap, alibi_slopes, mask_mod: as
    :func:`attention` took them. (:class:`VarlenResiduals` adds what
    :func:`cuflash.attention_varlen` took.)
    """

    q: object
    k: object
    v: object
    out: object
    lse: object
    causal: bool = False
    scale: float | None = None
    window: tuple | None = None
    softcap: float | None = None
    alibi_slopes: object = None
    mask_mod: object = None

    def options(self) -> dict:
        """The forward's settings as keyword arguments of attention (and of the naive paths)."""
        return dict(causal=self.causal, scale=self.scale, window=self.window,
                    softcap=self.softcap, alibi_slopes=self.alibi_slopes, mask_mod=self.mask_mod)


@dataclasses.dataclass(frozen=True, eq=False)
class VarlenResiduals(Residuals):
    """The :class:`Residuals` of :func:`cuflash.attention_varlen`: q (total_q, Hq, d), k
    (total_k, Hkv, d), v (total_k, Hkv, d_v), out (total_q, Hq, d_v), lse (Hq, total_q), the
    options, and the packing: cu_seqlens_q, cu_seqlens_k (int32, batch + 1 entries, on q's
    device) and max_seqlen_q, max_seqlen_k as the forward took them. References, not copies.
    :func:`cuflash.attention_varlen_backward` (or :func:`attention_backward`) takes it.
    mask_mod must stay None (the varlen API has none)."""

    cu_seqlens_q: object = None
    cu_seqlens_k: object = None
    max_seqlen_q: int | None = None
    max_seqlen_k: int | None = None
    #: the forward's checked cuflash.SeqLens of cu_seqlens_q, cu_seqlens_k (set by
    #: attention_varlen), so that the backward does not read them back again
    seqlens: object = dataclasses.field(default=None, repr=False)

    def options(self) -> dict:
        """The forward's settings as keyword arguments of attention_varlen (and of
        naive_attention_varlen), cu_seqlens and max_seqlen included: the forward's SeqLens in
        place of the arrays when it holds these very arrays."""
        lens, cu_q, cu_k = self.seqlens, self.cu_seqlens_q, self.cu_seqlens_k
        if lens is not None and lens.cu_seqlens_q is cu_q and lens.cu_seqlens_k is cu_k:
            cu_q, cu_k = lens, None
        return dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                    max_seqlen_q=self.max_seqlen_q, max_seqlen_k=self.max_seqlen_k,
                    causal=self.causal, scale=self.scale, window=self.window,
                    softcap=self.softcap, alibi_slopes=self.alibi_slopes)


def attention_backward(dout, residuals, *args, tile=None, deterministic=True, precision=None,
                       **kwargs):
    """Gradients of ``sum(dout · attention(q, k, v, ...))`` with respect to q, k and v.

    P is recomputed tile by tile from q, k and lse; no T×S matrix is stored.

    Parameters
    ----------
    dout : array (lead..., T, d_v)
        Gradient of the output, same dtype and device as q.
    residuals : Residuals
        The forward's inputs, output, lse and settings: ``attention(..., return_residuals=True)``
        returns them (or build a :class:`Residuals`). A :class:`VarlenResiduals` (from
        :func:`cuflash.attention_varlen`) runs :func:`cuflash.attention_varlen_backward`.
    tile : TileConfig, optional
        Default ``default_backward(d, dtype, ...)[0]`` (cuflash.tile).
    deterministic : bool
        True (default): a second pass sums dQ in a fixed order: identical bits every run, and
        on the H200 faster than atomics despite ~40% more arithmetic (NOTES.md, v2). False: dQ
        is summed over key tiles with float atomics in device memory, as FlashAttention-2 does;
        its bits can vary from run to run. The CPU twin mirrors both orders. False only
        permits atomics: with ``tile=None`` the library takes them where they measured faster
        (``cuflash.tile.default_backward``; on Hopper it runs the deterministic pair), with a
        tile given it runs that tile's atomic-dQ kernel. The TF32 backward (float32 with
        precision 'tf32' or 'highest') has no atomic mode and runs its pair either way.
    precision : {'highest', 'tf32', 'ieee'} or None
        How a float32 backward computes its five products, as :func:`attention`'s forward
        (``cuflash.precision``): 'highest' (the default) on TF32 tensor cores in three products
        per operand pair (3xTF32), 'tf32' one product of TF32-rounded operands, 'ieee' float32
        products on the CUDA cores. The TF32 backward takes head dims up to 128 and sm_80 or
        later; beyond, 'highest' runs on the CUDA cores and 'tf32' is an error. Independent of
        the forward's precision. Other dtypes have one precision each.

    Returns
    -------
    dq, dk, dv : new C-contiguous arrays shaped and typed like q, k and v (summed over
        broadcast leading dims, and under GQA over the G query heads that share a kv head).

    The CUDA path reads its arrays as :func:`attention` does; under GQA the dK/dV kernels sum
    each kv head's group in registers (no G-times buffer).
    """
    if args or kwargs or not isinstance(residuals, Residuals):
        extra = sorted(kwargs)
        raise TypeError(
            "attention_backward(dout, residuals, *, tile=None, deterministic=True, "
            "precision=None) takes the "
            "forward's residuals as one object, so that it runs with the forward's settings: "
            "out, res = cuflash.attention(q, k, v, ..., return_residuals=True), or "
            "cuflash.Residuals(q, k, v, out, lse, causal=..., ...) for arrays of your own"
            + (f"; got the unexpected keyword arguments {extra}" if extra else "")
            + (f"; got residuals of type {type(residuals).__name__} and {len(args)} more "
               f"positional arguments" if args or not isinstance(residuals, Residuals) else ""))
    if isinstance(residuals, VarlenResiduals):
        from .varlen import attention_varlen_backward
        return attention_varlen_backward(dout, residuals, tile=tile, deterministic=deterministic,
                                         precision=precision)
    r = residuals
    q, k, v, out, lse = r.q, r.k, r.v, r.out, r.lse
    p = checks.check_qkv(q, k, v, **r.options())
    deterministic = checks.check_bool("deterministic", deterministic)
    tile, deterministic, prec = _backward_choice(p, tile, deterministic, precision, dense=True)
    xp = p.xp
    full = p.lead + (p.T, p.dv)
    checks.check_same("dout", dout, "the output", full, p.dtype, xp)
    checks.check_same("out", out, "the forward's output", full, p.dtype, xp)
    checks.check_same("lse", lse, "the forward's lse", p.lead + (p.T,), accum_dtype(p.dtype), xp)
    if p.T == 0:
        return tuple(xp.zeros(x.shape, p.dtype) for x in (q, k, v))
    return _backward(p, dout, q, k, v, out, lse, tile, deterministic,
                     "ieee" if prec == "native" else prec)


_OPTIONS = ("causal", "scale", "window", "softcap", "alibi_slopes", "mask_mod")


def attention_vjp(q, k, v, **kwargs):
    """``(out, vjp)`` where ``vjp(dout) -> (dq, dk, dv)``: the handle autodiff code expects.

    Keyword arguments: the options of :func:`attention` (causal, scale, window, softcap,
    alibi_slopes, mask_mod, tile, precision), backward_tile and deterministic (backward);
    ``precision`` serves both passes. The forward's
    residuals are kept for the backward: references to q, k, v (not copies), out and lse;
    nothing T×S.
    """
    bwd_tile = checks.check_tile(kwargs.pop("backward_tile", None), "backward_tile")
    deterministic = kwargs.pop("deterministic", True)
    deterministic = checks.check_bool("deterministic", deterministic)
    unknown = set(kwargs) - set(_OPTIONS) - {"tile", "precision"}
    if unknown:
        raise TypeError(f"attention_vjp got unexpected keyword arguments {sorted(unknown)}; "
                        f"valid: {', '.join(_OPTIONS)}, tile, precision, backward_tile, "
                        f"deterministic")
    out, res = attention(q, k, v, return_residuals=True, **kwargs)

    def vjp(dout):
        return attention_backward(dout, res, tile=bwd_tile, deterministic=deterministic,
                                  precision=kwargs.get("precision"))

    return out, vjp


__all__ = ["attention", "attention_backward", "attention_vjp", "Residuals", "VarlenResiduals",
           "dtype_name"]
