"""Argument checks at the Python boundary: every error names the argument, its value and what is valid."""
from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np

from ._xp import DTYPES, accum_dtype, array_module, dtype_name
from .mask import Mask
from .tile import TileConfig

#: head dims attention accepts (q and k; v's head dim too, which may differ): 1 to 256.
SUPPORTED_HEAD_DIMS = tuple(range(1, 257))
#: head dims the CUDA kernels run natively today: every multiple of 8 from 16 to 256, with q, k
#: and v of one head dim. Other head dims reach them zero-padded (``pad_head_dim``).
KERNEL_HEAD_DIMS = tuple(range(16, 257, 8))


@dataclasses.dataclass(frozen=True)
class Problem:
    """Shapes of one attention call after checking. Leading dims are broadcast and flattened to
    ``batch``; the kernels and the twin see (batch, T, d) for q, (batch, S, d) for k and
    (batch, S, d_v) for v (K/V repeated per query head under GQA: ``flatten_kv``)."""

    xp: object          # numpy or cupy
    dtype: np.dtype
    lead: tuple         # broadcast leading dims (out has shape lead + (T, d))
    T: int
    S: int
    d: int
    scale: float
    mask: Mask          # which keys each query sees (causal, window)
    softcap: float | None = None   # scores become softcap·tanh(s / softcap)
    alibi_slopes: object = None    # (batch,) ALiBi slope per flattened batch entry, or None
    mask_mod: object = None        # a cuflash.MaskMod, or None
    d_v: int | None = None         # v's head dim (out's), when it differs from d
    group: int = 1                 # GQA: query heads per kv head (axis -3); 1 without GQA

    @property
    def heads(self) -> int:
        """Size of the head axis (-3) of the output (the query heads), so that a flattened batch
        index is (b, h) = divmod(., heads)."""
        return int(self.lead[-1]) if self.lead else 1

    @property
    def dv(self) -> int:
        """Head dim of v and of the output."""
        return self.d if self.d_v is None else self.d_v

    @property
    def kernel_d(self) -> int:
        """The head dim the CUDA kernels run this problem at today: the smallest of
        KERNEL_HEAD_DIMS holding both d and dv (``pad_head_dim``)."""
        return kernel_head_dim(max(self.d, self.dv))

    @property
    def batch(self) -> int:
        return int(np.prod(self.lead, dtype=np.int64))

    @property
    def causal(self) -> bool:
        return self.mask.causal


_SUPPORTED = frozenset(np.dtype(t) for t in DTYPES.values() if t is not None)


def check_dtype(name, a):
    """TypeError naming `name` unless a's dtype is one attention takes."""
    dt = a.dtype
    if dt in _SUPPORTED:   # the common case, without building names
        return
    if dt.kind != "f" and dtype_name(dt) != "bfloat16":
        raise TypeError(f"{name} has dtype {dtype_name(dt)}; attention needs floating point: "
                        f"one of {sorted(DTYPES)}")
    if dtype_name(dt) not in DTYPES:
        raise TypeError(f"{name} has dtype {dtype_name(dt)}; supported: {sorted(DTYPES)}")


def _head_dims_text() -> str:
    return "an int from 1 to 256"


def check_head_dim(d: int, what: str) -> None:
    """ValueError naming ``what`` (e.g. 'head_dim=0 (q.shape[-1])') unless 1 <= d <= 256."""
    if not 1 <= d <= 256:    # SUPPORTED_HEAD_DIMS, without a search through it
        raise ValueError(f"{what} is not supported; head_dim must be {_head_dims_text()}")


def _dtypes_and_head_dims(q, k, v) -> tuple[int, int]:
    """(d, d_v) after checking that q, k, v share one dtype, q and k one head dim, and both
    head dims are supported (v's may differ from q's)."""
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype; got q: {dtype_name(q.dtype)}, "
                        f"k: {dtype_name(k.dtype)}, v: {dtype_name(v.dtype)}")
    d, d_v = q.shape[-1], v.shape[-1]
    if k.shape[-1] != d:
        raise ValueError(f"head_dim must match: q.shape[-1]={d}, k.shape[-1]={k.shape[-1]} "
                         f"(v's head dim may differ: v.shape[-1]={d_v})")
    check_head_dim(d, f"head_dim={d} (q.shape[-1])")
    if d_v != d:
        check_head_dim(d_v, f"head_dim_v={d_v} (v.shape[-1])")
    return d, d_v


def _positive_real(name, value, extra="") -> float:
    """A finite real number > 0 (not a bool), as a float; errors name the argument."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number or None, got {value!r}")
    x = float(value)
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"{name}={value!r} must be finite and > 0{extra}")
    return x


_LOG2E = 1.4426950408889634
#: ALiBi's largest |slope| is finfo(acc).max / _ALIBI_ROOM: slope·|i + S - T - j|·log2(e) stays
#: finite for distances below 2^30 (mask.UNBOUNDED)
_ALIBI_ROOM = 2.0 ** 32


def _acc_info(dtype):
    """finfo of the dtype the kernels and the twin compute scores in (``accum_dtype``), and a
    phrase naming it for errors."""
    acc = np.dtype(accum_dtype(dtype))
    return np.finfo(acc), f"{acc.name} (the scores' dtype for {dtype_name(dtype)} inputs)"


def check_scale(scale, d: int, dtype) -> float:
    """The scores' scale: 1 / sqrt(d) for None, else a real number > 0 whose scale·log2(e) (the
    kernels' exponent factor) is finite in the scores' dtype."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    x = _positive_real("scale", scale)
    fi, where = _acc_info(dtype)
    if x * _LOG2E > float(fi.max):
        raise ValueError(f"scale={scale!r} is too large: scale·log2(e) overflows {where}")
    return x


def logit_limit(dtype) -> float:
    """The largest |logit| (score · log2(e), the exponent's units) the GPU kernels take in the
    scores' dtype: 2^31 for float32 scores, 2^63 for float64. Their exponent of a score is one
    fused multiply-add, s·log2(e)·scale - m, exact but for the rounding of the row's max m, up to
    half an ulp of it: past these, that is 2^7 (2^10 in float64) or more, and 2^x overflows
    (NaN) where the CPU twin, subtracting the rounded product, does not."""
    return 2.0 ** 63 if np.dtype(accum_dtype(dtype)) == np.float64 else 2.0 ** 31


def check_softcap(softcap, scale: float, dtype) -> float | None:
    """None (no cap) or a float c > 0 (``cuflash.scores``) whose c·log2(e) is finite and scale / c
    (tanh's argument per unit of q·k) a normal number in the scores' dtype: a cap that large would
    overflow, or flush tanh's argument to zero on the GPU, where it caps nothing anyway. Capped
    logits are at most c·log2(e), which must also stay below ``logit_limit``."""
    if softcap is None:
        return None
    c = _positive_real("softcap", softcap, " (or None for no cap)")
    fi, where = _acc_info(dtype)
    if c * _LOG2E > float(fi.max) or scale / c < float(fi.tiny):
        raise ValueError(f"softcap={softcap!r} is too large for scale={scale:g} in {where}: "
                         f"c·log2(e) must be finite and scale / c at least {float(fi.tiny):g} "
                         f"(or None for no cap)")
    limit = logit_limit(dtype)
    if c * _LOG2E >= limit:
        raise ValueError(f"softcap={softcap!r} is too large in {where}: the capped logits "
                         f"c·log2(e) must stay below 2^{int(math.log2(limit))}, where the "
                         f"kernels' exponents still fit (or None for no cap)")
    return c


def check_alibi(alibi_slopes, lead: tuple, dtype, xp, reach: int):
    """ALiBi slopes broadcast to the leading dims and flattened: (batch,) in the accumulation
    dtype (float32; float64 for float64 inputs) on the inputs' device, or None.

    ``alibi_slopes``: a float array of the inputs' array module whose shape broadcasts to the
    leading dims ``lead`` of the problem (one slope per head: shape (H,) for (B, H, T, d)
    inputs), finite. ``reach``: the longest query-key distance |i + S - T - j| the call can
    hold (max(T, S) - 1); the bias slope·reach·log2(e) must stay below ``logit_limit``, as a
    row whose visible keys all lie that far away has its max there."""
    if alibi_slopes is None:
        return None
    try:
        mod = array_module(alibi_slopes=alibi_slopes)
    except TypeError:
        raise TypeError(f"alibi_slopes must be a float array of shape broadcastable to the "
                        f"leading dims {tuple(lead)}, got {type(alibi_slopes).__name__}") from None
    if mod is not xp:
        raise TypeError("alibi_slopes is on a different device from q, k, v")
    name = dtype_name(alibi_slopes.dtype)
    if name not in ("float32", "float64"):
        raise TypeError(f"alibi_slopes must be float32 or float64, got {name}")
    try:
        full = xp.broadcast_to(alibi_slopes, tuple(lead))
    except ValueError:
        raise ValueError(f"alibi_slopes of shape {tuple(alibi_slopes.shape)} does not broadcast "
                         f"to the leading dims {tuple(lead)} of q, k, v (one slope per head: "
                         f"shape (heads,) for (batch, heads, T, d) inputs)") from None
    # one reduction (on CuPy one device sync): the largest |slope|, NaN if any slope is NaN
    biggest = float(xp.abs(alibi_slopes).max()) if alibi_slopes.size else 0.0
    if not math.isfinite(biggest):
        raise ValueError("alibi_slopes must be finite")
    fi, where = _acc_info(dtype)
    if biggest > float(fi.max) / _ALIBI_ROOM:
        raise ValueError(f"alibi_slopes must be at most {float(fi.max) / _ALIBI_ROOM:g} in "
                         f"magnitude in {where} (slope·distance·log2(e) finite for every "
                         f"distance), got {biggest:g}")
    limit = logit_limit(dtype)
    if biggest * max(int(reach), 0) * _LOG2E >= limit:
        raise ValueError(f"alibi_slopes up to {biggest:g} in magnitude are too large for query-key "
                         f"distances up to {int(reach)} in {where}: slope·distance·log2(e) must "
                         f"stay below 2^{int(math.log2(limit))}, where the kernels' exponents "
                         f"still fit")
    acc = accum_dtype(dtype)
    return xp.ascontiguousarray(full.astype(acc, copy=False)).reshape(-1)


def check_tile(tile, name: str = "tile"):
    if tile is not None and not isinstance(tile, TileConfig):
        raise TypeError(f"{name} must be a cuflash.TileConfig or None, got {type(tile).__name__}")
    return tile


def _heads_and_lead(q, k, v):
    """(group, lead): the GQA group size G (1 without GQA) and the broadcast leading dims of the
    output. GQA when q and k/v both have a head axis (-3) and their sizes differ with neither 1:
    Hq must then be a multiple of Hkv, and query head h reads kv head h // G."""
    shapes = (q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if shapes[0] == shapes[1] == shapes[2]:            # the common case, checked cheaply
        return 1, tuple(shapes[0])
    group = 1
    kv_heads = {x.shape[-3] for x in (k, v) if x.ndim >= 3} - {1}
    if q.ndim >= 3 and len(kv_heads) == 1:
        hq, hkv = q.shape[-3], kv_heads.pop()
        if hq > hkv > 0:   # (fewer query heads than kv heads: a broadcast error below)
            if hq % hkv:
                raise ValueError(
                    f"q has {hq} heads (q.shape[-3]) and k, v have {hkv} (k.shape="
                    f"{tuple(k.shape)}, v.shape={tuple(v.shape)}): the query heads must be a "
                    f"multiple of the kv heads (GQA: query head h reads kv head h // (Hq / Hkv))")
            group = hq // hkv
            # k, v take part in the broadcast with Hq heads (each kv head repeated G times)
            shapes = (shapes[0],) + tuple(x.shape[:-3] + ((hq,) if x.shape[-3] == hkv else (1,))
                                          if x.ndim >= 3 else x.shape[:-2] for x in (k, v))
    try:
        lead = np.broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(f"leading dims of q {tuple(q.shape[:-2])}, k {tuple(k.shape[:-2])} and "
                         f"v {tuple(v.shape[:-2])} do not broadcast") from None
    return group, tuple(lead)


def check_qkv(q, k, v, *, causal, scale, window=None, softcap=None, alibi_slopes=None,
              mask_mod=None) -> Problem:
    """Check q (..., T, d), k (..., S, d), v (..., S, d_v) and the attention options, and return
    the Problem they pose. The head axis is -3; k and v may have fewer heads than q (GQA)."""
    xp = array_module(q=q, k=k, v=v)
    for name, a in (("q", q), ("k", k), ("v", v)):
        if a.ndim < 2:
            raise ValueError(f"{name} must have at least 2 dims (..., seq_len, head_dim); "
                             f"got shape {tuple(a.shape)}")
        check_dtype(name, a)
    d, d_v = _dtypes_and_head_dims(q, k, v)
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same sequence length: k.shape={tuple(k.shape)}, "
                         f"v.shape={tuple(v.shape)}")
    group, lead = _heads_and_lead(q, k, v)
    T, S = q.shape[-2], k.shape[-2]
    mask = Mask.make(causal=causal, window=window)
    if mask_mod is not None:
        from .mask_mod import MaskMod
        if not isinstance(mask_mod, MaskMod):
            raise TypeError(f"mask_mod must be a cuflash.MaskMod or None, got "
                            f"{type(mask_mod).__name__}")
    scale = check_scale(scale, d, q.dtype)
    return Problem(xp, q.dtype, lead, T, S, d, scale, mask,
                   check_softcap(softcap, scale, q.dtype),
                   check_alibi(alibi_slopes, lead, q.dtype, xp, max(T, S) - 1), mask_mod,
                   None if d_v == d else d_v, group)


@dataclasses.dataclass(frozen=True)
class VarlenProblem:
    """One checked call of attention_varlen: sequence b has the query tokens
    cu_q[b]..cu_q[b+1]-1 of q (total_q, Hq, d) and the key tokens cu_k[b]..cu_k[b+1]-1 of
    k (total_k, Hkv, d) and v (total_k, Hkv, d_v); cu_q, cu_k are host copies (int64) of lens,
    the SeqLens they come from (cu_given: its arrays, what the kernels read). A call given GPU
    arrays and both max_seqlen bounds has its lens checked and read back when a host copy is
    first asked for (checks._PendingSeqLens): until then max_seqlen_q/k are the bounds."""

    xp: object
    dtype: np.dtype
    Hq: int
    Hkv: int
    d: int
    dv: int
    total_q: int
    total_k: int
    scale: float
    mask: Mask
    softcap: float | None
    alibi_slopes: object           # (batch, Hq) in the accumulation dtype on xp, or None
    lens: object = dataclasses.field(default=None, compare=False, repr=False)   # SeqLens

    @property
    def cu_given(self) -> tuple:
        """The caller's int32 cu_seqlens arrays as given (on q's device: what the kernels
        read)."""
        return self.lens.cu_seqlens_q, self.lens.cu_seqlens_k

    @property
    def cu_q(self) -> np.ndarray:
        return self.lens.cu_q

    @property
    def cu_k(self) -> np.ndarray:
        return self.lens.cu_k

    @property
    def batch(self) -> int:
        return self.lens.batch

    @property
    def max_seqlen_q(self) -> int:
        """The longest query length (a pending lens: the caller's bound), what the kernels'
        grid is sized by."""
        return self.lens.max_seqlen_q

    @property
    def max_seqlen_k(self) -> int:
        return self.lens.max_seqlen_k

    @property
    def lengths_q(self) -> np.ndarray:
        return np.diff(self.cu_q)

    @property
    def kernel_d(self) -> int:
        """The head dim the CUDA kernels run it at (``Problem.kernel_d``)."""
        return kernel_head_dim(max(self.d, self.dv))

    @property
    def causal(self) -> bool:
        return self.mask.causal

    @property
    def lengths_k(self) -> np.ndarray:
        return np.diff(self.cu_k)

    def options(self) -> dict:
        """causal, window, softcap and scale as cuflash.attention takes them per sequence."""
        m = self.mask
        return dict(causal=False, window=(m.left, m.right), softcap=self.softcap,
                    scale=self.scale)


def _device_of(a):
    """None for a NumPy array, the GPU id of a CuPy array."""
    return None if isinstance(a, np.ndarray) else int(a.device.id)


def _where(dev) -> str:
    return "on the host (NumPy)" if dev is None else f"on GPU {dev} (CuPy)"


def _check_cu_array(name, a, dev, ref="q") -> None:
    """What can be checked of cu_seqlens ``a`` without reading it: an int32 array, 1-D with at
    least one entry, on device ``dev`` (``ref``'s)."""
    array_module(**{name: a})
    if _device_of(a) != dev:
        raise TypeError(f"{name} is {_where(_device_of(a))} but {ref} is {_where(dev)}: move "
                        f"it to {ref}'s device")
    if a.dtype != np.int32:
        raise TypeError(f"{name} must have dtype int32 (as flash_attn_varlen_func's), got "
                        f"{dtype_name(a.dtype)}")
    if a.ndim != 1 or a.shape[0] < 1:
        raise ValueError(f"{name} must be 1-D with batch + 1 entries (the first token of each "
                         f"sequence, then the total), got shape {tuple(a.shape)}")


def _read_cu_seqlens(name, a, dev, ref="q") -> np.ndarray:
    """A host int64 copy of cu_seqlens ``a`` (a device sync on CuPy) after checking it: int32,
    1-D with at least one entry, on device ``dev`` (``ref``'s), starting at 0, non-decreasing."""
    _check_cu_array(name, a, dev, ref)
    c = np.asarray(a if dev is None else a.get(), dtype=np.int64)
    if c[0] != 0:
        raise ValueError(f"{name}[0]={c[0]} must be 0 (the first sequence starts at token 0)")
    drop = np.flatnonzero(np.diff(c) < 0)
    if drop.size:
        b = int(drop[0])
        raise ValueError(f"{name} must be non-decreasing: {name}[{b + 1}]={c[b + 1]} < "
                         f"{name}[{b}]={c[b]}")
    return c


def _check_total(name, c, total: int, total_text: str) -> None:
    if c[-1] != total:
        raise ValueError(f"{name}[-1]={c[-1]} must equal {total_text}={total} (the total number "
                         f"of tokens)")


class SeqLens:
    """The packing of a variable-length batch, checked once for many calls.

    ``cuflash.SeqLens(cu_seqlens_q, cu_seqlens_k=None)`` checks cu_seqlens as
    :func:`cuflash.attention_varlen` does (int32, 1-D, batch + 1 entries, starting at 0, never
    decreasing, both on one device and of one batch; cu_seqlens_k None: the same as
    cu_seqlens_q) and keeps host copies of them. That check reads the arrays back to the host,
    a device sync on CuPy, which a call given the arrays themselves makes every time: it stalls
    the GPU between calls. Passed as ``cu_seqlens_q`` (with ``cu_seqlens_k`` left out) to
    :func:`cuflash.attention_varlen`, :func:`cuflash.naive_attention_varlen` and their
    backwards, it spares them the readback, so calls queue on the GPU as dense ones do (one
    SeqLens per packed batch serves every layer's forward and backward). A call still checks
    that the totals match q and k and that max_seqlen holds every length, from the host copies.

    The device arrays are kept by reference, not copied: they must not change while the
    SeqLens is used (the kernels read them; the checks read the host copies).

    Attributes: cu_seqlens_q, cu_seqlens_k (the arrays as given), cu_q, cu_k (host int64
    copies), batch, max_seqlen_q, max_seqlen_k.
    """

    def __init__(self, cu_seqlens_q, cu_seqlens_k=None):
        if isinstance(cu_seqlens_q, SeqLens):
            raise TypeError("cu_seqlens_q is a SeqLens already: pass it to attention_varlen "
                            "as cu_seqlens_q directly")
        array_module(cu_seqlens_q=cu_seqlens_q)
        self._read(cu_seqlens_q, cu_seqlens_k, _device_of(cu_seqlens_q), "cu_seqlens_q")

    def _read(self, cu_seqlens_q, cu_seqlens_k, dev, ref):
        """Check both arrays (on device ``dev``, ``ref``'s) and keep them and their host
        copies."""
        self.cu_seqlens_q = cu_seqlens_q
        self.cu_q = _read_cu_seqlens("cu_seqlens_q", cu_seqlens_q, dev, ref)
        if cu_seqlens_k is None or cu_seqlens_k is cu_seqlens_q:
            self.cu_seqlens_k, self.cu_k = cu_seqlens_q, self.cu_q
        else:
            self.cu_seqlens_k = cu_seqlens_k
            self.cu_k = _read_cu_seqlens("cu_seqlens_k", cu_seqlens_k, dev, ref)
        if len(self.cu_q) != len(self.cu_k):
            raise ValueError(f"cu_seqlens_q has {len(self.cu_q)} entries ({len(self.cu_q) - 1} "
                             f"sequences) and cu_seqlens_k {len(self.cu_k)} "
                             f"({len(self.cu_k) - 1} sequences): both must have batch + 1")
        self.device = dev

    def resolve(self) -> None:
        """Nothing to do: checked when made (a call's pending SeqLens reads back here)."""

    @property
    def batch(self) -> int:
        return len(self.cu_q) - 1

    @property
    def max_seqlen_q(self) -> int:
        return int(np.diff(self.cu_q).max(initial=0))

    @property
    def max_seqlen_k(self) -> int:
        return int(np.diff(self.cu_k).max(initial=0))

    def __repr__(self) -> str:
        return (f"SeqLens(batch={self.batch}, total_q={int(self.cu_q[-1])}, "
                f"total_k={int(self.cu_k[-1])}, {_where(self.device)})")


class _PendingSeqLens(SeqLens):
    """The SeqLens of a call given cu_seqlens arrays and both max_seqlen bounds: the arrays'
    shapes, dtypes and devices checked now, their values read back (on the GPU a device sync)
    and checked only when first needed (``resolve``; any host copy asked for resolves), which
    the GPU forward leaves until its launch is prepared (ops._forward's ``before_launch``), so
    that the sync's idle GPU waits for the checks and the launch alone, not for the preparation
    (the twin reads them at once).
    Until then ``max_seqlen_q`` and ``max_seqlen_k`` are the caller's bounds, which size the
    kernels' grid (flash-attn's convention); ``resolve`` checks that they hold every length and
    that the totals are q's and k's tokens, with the errors of the checks made at once."""

    def __init__(self, cu_seqlens_q, cu_seqlens_k, dev, max_seqlen_q, max_seqlen_k, total_q,
                 total_k):
        _check_cu_array("cu_seqlens_q", cu_seqlens_q, dev)
        _check_cu_array("cu_seqlens_k", cu_seqlens_k, dev)
        nq, nk = int(cu_seqlens_q.shape[0]), int(cu_seqlens_k.shape[0])
        if nq != nk:
            raise ValueError(f"cu_seqlens_q has {nq} entries ({nq - 1} sequences) and "
                             f"cu_seqlens_k {nk} ({nk - 1} sequences): both must have batch + 1")
        self.cu_seqlens_q, self.cu_seqlens_k, self.device = cu_seqlens_q, cu_seqlens_k, dev
        self._n = nq
        self._bounds = (max_seqlen_q, max_seqlen_k)
        self._totals = (total_q, total_k)
        self._host = None

    def resolve(self) -> None:
        """Read cu_seqlens back and check them (once): every error of the immediate checks."""
        if self._host is not None:
            return
        lens = SeqLens.__new__(SeqLens)
        lens._read(self.cu_seqlens_q, self.cu_seqlens_k, self.device, "q")
        _check_totals(lens.cu_q, lens.cu_k, *self._totals)
        _check_bounds(lens.cu_q, lens.cu_k, *self._bounds)
        self._host = (lens.cu_q, lens.cu_k)

    @property
    def cu_q(self):
        self.resolve()
        return self._host[0]

    @property
    def cu_k(self):
        self.resolve()
        return self._host[1]

    @property
    def batch(self) -> int:
        return self._n - 1

    @property
    def max_seqlen_q(self) -> int:
        return self._bounds[0] if self._host is None else super().max_seqlen_q

    @property
    def max_seqlen_k(self) -> int:
        return self._bounds[1] if self._host is None else super().max_seqlen_k


def _check_totals(cu_q, cu_k, total_q: int, total_k: int) -> None:
    _check_total("cu_seqlens_q", cu_q, total_q, "q.shape[0]")
    _check_total("cu_seqlens_k", cu_k, total_k, "k.shape[0]")


def _check_bounds(cu_q, cu_k, max_seqlen_q, max_seqlen_k) -> None:
    _check_max_seqlen("max_seqlen_q", max_seqlen_q, np.diff(cu_q), "cu_seqlens_q")
    _check_max_seqlen("max_seqlen_k", max_seqlen_k, np.diff(cu_k), "cu_seqlens_k")


def _seqlens(cu_seqlens_q, cu_seqlens_k, dev) -> SeqLens:
    """The SeqLens of attention_varlen's cu_seqlens arguments: given, or checked now (a device
    sync on CuPy), on q's device ``dev``."""
    if isinstance(cu_seqlens_q, SeqLens):
        lens = cu_seqlens_q
        if cu_seqlens_k is not None:
            raise TypeError("cu_seqlens_k must be left out (None) when cu_seqlens_q is a "
                            "cuflash.SeqLens: it holds both")
        if lens.device != dev:
            raise TypeError(f"the SeqLens' cu_seqlens are {_where(lens.device)} but q is "
                            f"{_where(dev)}: move them to q's device")
        return lens
    if cu_seqlens_q is None:
        raise TypeError("cu_seqlens_q is missing: pass the queries' cu_seqlens (int32, batch + "
                        "1 entries) with cu_seqlens_k, or a cuflash.SeqLens")
    if cu_seqlens_k is None:
        raise TypeError("cu_seqlens_k is missing: pass the keys' cu_seqlens (int32, batch + 1 "
                        "entries), or a cuflash.SeqLens as cu_seqlens_q")
    lens = SeqLens.__new__(SeqLens)   # the arrays checked against q's device, not each other's
    lens._read(cu_seqlens_q, cu_seqlens_k, dev, "q")
    return lens


def _check_max_seqlen(name, value, lengths, cu_name) -> None:
    if value is None:
        return
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int or None, got {value!r}")
    if value < 0:
        raise ValueError(f"{name}={value} must be >= 0")
    if lengths.size and value < lengths.max():
        b = int(np.argmax(lengths))
        raise ValueError(f"{name}={value} is smaller than sequence {b}'s length {lengths[b]} "
                         f"({cu_name}[{b + 1}] - {cu_name}[{b}])")


def check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, max_seqlen_q=None, max_seqlen_k=None,
                 causal=False, scale=None, window=None, softcap=None,
                 alibi_slopes=None) -> VarlenProblem:
    """Check the arguments of attention_varlen (every error names the argument) and return the
    VarlenProblem they pose. Reads cu_seqlens on the host (a device sync on CuPy) unless
    cu_seqlens_q is a SeqLens (checked when it was made; cu_seqlens_k then None)."""
    xp = array_module(q=q, k=k, v=v)
    dev = _device_of(q)
    for name, a in (("k", k), ("v", v)):
        if _device_of(a) != dev:
            raise TypeError(f"{name} is {_where(_device_of(a))} but q is {_where(dev)}")
    for name, a, what in (("q", q, "(total_q, heads, head_dim)"),
                          ("k", k, "(total_k, kv_heads, head_dim)"),
                          ("v", v, "(total_k, kv_heads, head_dim_v)")):
        if a.ndim != 3:
            raise ValueError(f"{name} must have 3 dims {what} (tokens of every sequence packed "
                             f"along axis 0), got shape {tuple(a.shape)}")
        check_dtype(name, a)
    d, d_v = _dtypes_and_head_dims(q, k, v)
    if k.shape[:2] != v.shape[:2]:
        raise ValueError(f"k and v must have the same tokens and kv heads: k.shape="
                         f"{tuple(k.shape)}, v.shape={tuple(v.shape)}")
    Hq, Hkv = int(q.shape[1]), int(k.shape[1])
    if Hkv < 1 or Hq % Hkv:
        raise ValueError(f"q has {Hq} heads (q.shape[1]) and k, v have {Hkv} (k.shape[1]): the "
                         f"query heads must be a multiple of the kv heads, at least 1 (GQA: "
                         f"query head h reads kv head h // (Hq / Hkv))")
    for name, value in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        _check_max_seqlen(name, value, np.zeros(0, np.int64), "")
    if (not isinstance(cu_seqlens_q, SeqLens) and cu_seqlens_k is not None
            and max_seqlen_q is not None and max_seqlen_k is not None):
        lens = _PendingSeqLens(cu_seqlens_q, cu_seqlens_k, dev, int(max_seqlen_q),
                               int(max_seqlen_k), int(q.shape[0]), int(k.shape[0]))
    else:
        lens = _seqlens(cu_seqlens_q, cu_seqlens_k, dev)
        _check_totals(lens.cu_q, lens.cu_k, int(q.shape[0]), int(k.shape[0]))
        _check_bounds(lens.cu_q, lens.cu_k, max_seqlen_q, max_seqlen_k)
    mask = Mask.make(causal=causal, window=window)
    slopes = check_alibi(alibi_slopes, (lens.batch, Hq), q.dtype, xp,
                         max(lens.max_seqlen_q, lens.max_seqlen_k) - 1)
    if slopes is not None:
        slopes = slopes.reshape(lens.batch, Hq)
    scale = check_scale(scale, d, q.dtype)
    return VarlenProblem(xp, q.dtype, Hq, Hkv, d, d_v, int(q.shape[0]), int(k.shape[0]),
                         scale, mask, check_softcap(softcap, scale, q.dtype), slopes, lens)


#: split-KV's most splits per query tile: the merging block keeps each split's weight of a row in
#: shared memory (kernels_cu/split_combine.cuh); FlashAttention-2 caps its splits at 128
MAX_SPLITS = 256


def check_bool(name: str, value) -> bool:
    """A flag argument: a bool (NumPy's too), else a TypeError naming it."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return bool(value)


def check_num_splits(num_splits, *, allow_none=True):
    """Split-KV's splits: an int from 1 to MAX_SPLITS, or None (automatic) where allowed."""
    if num_splits is None and allow_none:
        return None
    if isinstance(num_splits, (bool, np.bool_)) or not isinstance(num_splits, numbers.Integral):
        raise TypeError(f"num_splits must be an int from 1 to {MAX_SPLITS}"
                        f"{' or None' if allow_none else ''}, got {num_splits!r}")
    if not 1 <= num_splits <= MAX_SPLITS:
        raise ValueError(f"num_splits={num_splits!r} must be from 1 to {MAX_SPLITS}"
                         f"{' (or None: automatic)' if allow_none else ''}")
    return int(num_splits)


def check_same(name, a, ref_name, shape, dtype, xp):
    """`a` must be an array of module xp with the given shape and dtype."""
    array_module(**{name: a})
    if (xp is np) != isinstance(a, np.ndarray):
        raise TypeError(f"{name} is on a different device from {ref_name}")
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} (as {ref_name}), got {tuple(a.shape)}")
    if a.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype_name(dtype)}, got {dtype_name(a.dtype)}")


# -- Array shapes for the twin, and the head-dim padding of the GPU path -----------------------
#
# The CUDA kernels read the caller's arrays in place (cuflash/gpu/views.py: strides, broadcasts,
# GQA's kv heads, packed batches). The CPU twin takes C-contiguous (batch, n, d) arrays with one
# K/V head per query head, so its path (cuflash.api) makes them here:
#
#   flatten        strided, broadcast or Fortran-ordered inputs -> C-contiguous (batch, n, d)
#   flatten_kv     GQA: each kv head repeated G times along axis -3 (k and v, G times their size)
#   unbroadcast    gradients summed back over GQA groups and broadcast dims (float32 sums; the
#                  GPU path sums only broadcast dims: its kernels sum the groups)
#   pad_head_dim   (GPU) q, k, v, dout, out zero-padded to kernel_head_dim(max(d, d_v))
#   unpad          (GPU) outputs sliced back to their head dim (a copy, C-contiguous)
#
# The twin takes any head dim; variable-length batches run on the twin one group of equal
# lengths at a time (cuflash.varlen, ``_groups``), on the GPU in one launch.

def flatten(x, lead, xp):
    """Broadcast x (..., n, d) to lead + (n, d) and view it as a C-contiguous (batch, n, d) array.

    Copies only when x is broadcast, non-contiguous (any strided view, e.g. a (B, T, H, d) array
    transposed to (B, H, T, d)) or Fortran-ordered."""
    batch = math.prod(lead)   # explicit, not -1: a zero-size row (n = 0) leaves -1 ambiguous
    if tuple(x.shape[:-2]) == tuple(lead) and x.flags.c_contiguous:   # no copy, few objects
        return x if x.ndim == 3 else x.reshape((batch,) + tuple(x.shape[-2:]))
    x = xp.broadcast_to(x, tuple(lead) + tuple(x.shape[-2:]))
    return xp.ascontiguousarray(x).reshape((batch,) + tuple(x.shape[-2:]))


def flatten_kv(x, p: Problem, xp):
    """k or v (..., Hkv, S, d) as the C-contiguous (batch, S, d) array of ``flatten``, one entry
    per query head: under GQA (p.group = G > 1) query head h reads kv head h // G, so each kv
    head is repeated G times along axis -3 first (a copy of G times x's size; a k or v with one
    head is broadcast instead). The kernels will index the shared head instead."""
    if p.group > 1 and x.ndim >= 3 and x.shape[-3] > 1:
        x = xp.repeat(x, p.group, axis=-3)
    return flatten(x, p.lead, xp)


def unbroadcast(g, shape, xp, group: int = 1):
    """Sum a gradient of shape lead + (n, d) back to an input's own (broadcast) shape: first
    over GQA groups (``group`` consecutive query heads of axis -3 per kv head), then over the
    leading dims the input was broadcast along. 16-bit sums run in float32, rounded once."""
    if tuple(g.shape) == tuple(shape) and group == 1:
        return g
    dtype = g.dtype
    if group > 1:   # (..., Hq, n, d) -> (..., Hkv, G, n, d), summed over G
        wide = g.astype(np.float64 if dtype == np.float64 else np.float32)
        g = wide.reshape(g.shape[:-3] + (g.shape[-3] // group, group) + g.shape[-2:]).sum(axis=-3)
    extra = g.ndim - len(shape)
    axes = list(range(extra)) + [extra + i for i, s in enumerate(shape[:-2]) if s == 1
                                 and g.shape[extra + i] != 1]
    acc = g.astype(np.float64 if g.dtype == np.float64 else np.float32).sum(
        axis=tuple(axes), keepdims=True)
    return acc.reshape(shape).astype(dtype)


def kernel_head_dim(d: int) -> int:
    """The smallest head dim of KERNEL_HEAD_DIMS that holds d (1 <= d <= 256)."""
    return max(16, -(-d // 8) * 8)


def pad_head_dim(x, D: int, xp):
    """x (..., n, d) with its last axis zero-padded to D (a C-contiguous copy), or x when d == D.

    The GPU path's way to head dims the kernels do not run (KERNEL_HEAD_DIMS) and to
    head_dim_v != head_dim: q, k and v (and dout, out in the backward) are padded to one
    D = kernel_head_dim(max(d, d_v)). Zero columns of q and k add nothing to q·k, zero columns of
    v make zero output columns, which ``unpad`` drops; the scale stays 1/sqrt(real d)."""
    d = x.shape[-1]
    if d == D:
        return x
    out = xp.zeros(tuple(x.shape[:-1]) + (D,), dtype=x.dtype)
    out[..., :d] = x
    return out


def unpad(x, d: int, xp):
    """x (..., n, D) sliced to its first d columns, C-contiguous (a copy), or x when D == d."""
    return x if x.shape[-1] == d else xp.ascontiguousarray(x[..., :d])
