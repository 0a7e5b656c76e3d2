"""Argument checks at the Python boundary: every error names the argument, its value and what is valid."""
from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np

from ._xp import DTYPES, accum_dtype, array_module, dtype_name
from .mask import Mask
from .tile import TileConfig

#: head dims the kernels are built for: every multiple of 8 from 16 to 256.
SUPPORTED_HEAD_DIMS = tuple(range(16, 257, 8))


@dataclasses.dataclass(frozen=True)
class Problem:
    """Shapes of one attention call after checking. Leading dims are broadcast and flattened to
    ``batch``; the kernels and the twin see (batch, T, d) and (batch, S, d)."""

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

    @property
    def heads(self) -> int:
        """Size of the head axis (-3), so that a flattened batch index is (b, h) = divmod(., heads)."""
        return int(self.lead[-1]) if self.lead else 1

    @property
    def batch(self) -> int:
        return int(np.prod(self.lead, dtype=np.int64))

    @property
    def causal(self) -> bool:
        return self.mask.causal


_SUPPORTED = frozenset(np.dtype(t) for t in DTYPES.values() if t is not None)


def _check_dtype(name, a):
    dt = a.dtype
    if dt in _SUPPORTED:   # the common case, without building names
        return
    if dt.kind != "f" and dtype_name(dt) != "bfloat16":
        raise TypeError(f"{name} has dtype {dtype_name(dt)}; attention needs floating point: "
                        f"one of {sorted(DTYPES)}")
    if dtype_name(dt) not in DTYPES:
        raise TypeError(f"{name} has dtype {dtype_name(dt)}; supported: {sorted(DTYPES)}")


def _head_dims_text() -> str:
    return f"a multiple of 8 from 16 to 256 ({', '.join(map(str, SUPPORTED_HEAD_DIMS))})"


def _positive_real(name, value, extra="") -> float:
    """A finite real number > 0 (not a bool), as a float; errors name the argument."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number or None, got {value!r}")
    x = float(value)
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"{name}={value!r} must be finite and > 0{extra}")
    return x


def check_scale(scale, d: int) -> float:
    return 1.0 / math.sqrt(d) if scale is None else _positive_real("scale", scale)


def check_softcap(softcap) -> float | None:
    """None (no cap) or a finite float > 0 (``cuflash.scores``)."""
    return None if softcap is None else _positive_real("softcap", softcap, " (or None for no cap)")


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
    name = dtype_name(alibi_slopes.dtype)
    if name not in ("float32", "float64"):
        raise TypeError(f"alibi_slopes must be float32 or float64, got {name}")
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


def check_tile(tile, name: str = "tile"):
    if tile is not None and not isinstance(tile, TileConfig):
        raise TypeError(f"{name} must be a cuflash.TileConfig or None, got {type(tile).__name__}")
    return tile


def check_qkv(q, k, v, *, causal, scale, window=None, softcap=None, alibi_slopes=None,
              mask_mod=None) -> Problem:
    """Check q (..., T, d), k (..., S, d), v (..., S, d) and the attention options, and return
    the Problem they pose."""
    xp = array_module(q=q, k=k, v=v)
    for name, a in (("q", q), ("k", k), ("v", v)):
        if a.ndim < 2:
            raise ValueError(f"{name} must have at least 2 dims (..., seq_len, head_dim); "
                             f"got shape {tuple(a.shape)}")
        _check_dtype(name, a)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype; got q: {dtype_name(q.dtype)}, "
                        f"k: {dtype_name(k.dtype)}, v: {dtype_name(v.dtype)}")
    d = q.shape[-1]
    if k.shape[-1] != d or v.shape[-1] != d:
        raise ValueError(f"head_dim must match: q.shape[-1]={d}, k.shape[-1]={k.shape[-1]}, "
                         f"v.shape[-1]={v.shape[-1]}")
    if d not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head_dim={d} is not supported; head_dim must be {_head_dims_text()}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same sequence length: k.shape={tuple(k.shape)}, "
                         f"v.shape={tuple(v.shape)}")
    try:
        lead = (q.shape[:-2] if q.shape[:-2] == k.shape[:-2] == v.shape[:-2] else
                np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    except ValueError:
        raise ValueError(f"leading dims of q {tuple(q.shape[:-2])}, k {tuple(k.shape[:-2])} and "
                         f"v {tuple(v.shape[:-2])} do not broadcast") from None
    T, S = q.shape[-2], k.shape[-2]
    mask = Mask.make(causal=causal, window=window)
    lead = tuple(lead)
    if mask_mod is not None:
        from .mask_mod import MaskMod
        if not isinstance(mask_mod, MaskMod):
            raise TypeError(f"mask_mod must be a cuflash.MaskMod or None, got "
                            f"{type(mask_mod).__name__}")
    return Problem(xp, q.dtype, lead, T, S, d, check_scale(scale, d), mask,
                   check_softcap(softcap), check_alibi(alibi_slopes, lead, q.dtype, xp), mask_mod)


def check_same(name, a, ref_name, shape, dtype, xp):
    """`a` must be an array of module xp with the given shape and dtype."""
    array_module(**{name: a})
    if (xp is np) != isinstance(a, np.ndarray):
        raise TypeError(f"{name} is on a different device from {ref_name}")
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} (as {ref_name}), got {tuple(a.shape)}")
    if a.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype_name(dtype)}, got {dtype_name(a.dtype)}")


def flatten(x, lead, xp):
    """Broadcast x (..., n, d) to lead + (n, d) and view it as a C-contiguous (batch, n, d) array.

    Copies only when x is broadcast, non-contiguous or Fortran-ordered."""
    batch = math.prod(lead)   # explicit, not -1: a zero-size row (n = 0) leaves -1 ambiguous
    if tuple(x.shape[:-2]) == tuple(lead) and x.flags.c_contiguous:   # no copy, few objects
        return x if x.ndim == 3 else x.reshape((batch,) + tuple(x.shape[-2:]))
    x = xp.broadcast_to(x, tuple(lead) + tuple(x.shape[-2:]))
    return xp.ascontiguousarray(x).reshape((batch,) + tuple(x.shape[-2:]))


def unbroadcast(g, shape, xp):
    """Sum a gradient of shape lead + (n, d) back to an input's own (broadcast) shape."""
    if tuple(g.shape) == tuple(shape):
        return g
    extra = g.ndim - len(shape)
    axes = list(range(extra)) + [extra + i for i, s in enumerate(shape[:-2]) if s == 1
                                 and g.shape[extra + i] != 1]
    acc = g.astype(np.float64 if g.dtype == np.float64 else np.float32).sum(
        axis=tuple(axes), keepdims=True)
    return acc.reshape(shape).astype(g.dtype)
