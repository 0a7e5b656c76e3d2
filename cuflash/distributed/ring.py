"""Ring attention (context parallelism): exact attention over a sequence split across ranks.

Every rank holds the queries, keys and values of its part of one sequence (``layout``:
contiguous or zigzag, ``cuflash.distributed.layout``). The key/value blocks travel around the
ring: at step s = 0 .. N-1 rank r holds the block of rank (r - s) mod N, posts the shift of that
block to rank r + 1 (``comm.shift``), runs its local attention calls against the block it holds
while the data moves (``plan.step_calls``: the global mask cut to the block), and merges each
call's (out, lse) into its running output (``merge``). N - 1 shifts in all.

The backward runs the same ring once more. With the merged out and lse,
``cuflash.attention_backward`` on ``Residuals(q, k_b, v_b, out, lse)`` gives exactly key block
b's share of dq and block b's dk, dv (``merge`` module docstring). dq is summed on the rank; the
dk, dv sums travel with their block (float32; float64 for float64) and reach the block's owner
after one more shift.

Before any data moves, every rank checks its inputs and the ranks all-gather a description of
them (shapes, dtype, every setting): a bad input on one rank, or ranks that disagree, is the
same clear error on every rank, not a hang.
"""
from __future__ import annotations

import ast
import dataclasses

import numpy as np

from .. import api, checks
from .._xp import accum_dtype, dtype_name
from .comm import CommError, check_comm
from .layout import check_divisible, check_layout
from .merge import merge_into
from .plan import ring_plan

_ERRORS = {"TypeError": TypeError, "ValueError": ValueError,
           "NotImplementedError": NotImplementedError, "IndexError": IndexError,
           "OverflowError": OverflowError, "ZeroDivisionError": ZeroDivisionError}
_OFFSET_NAMES = {"i": "ring_q_pos", "j": "ring_k_pos"}


class _Shift(ast.NodeTransformer):
    """i -> (i + ring_q_pos), j -> (j + ring_k_pos) in a mask_mod expression."""

    def visit_Name(self, node):
        if node.id in _OFFSET_NAMES:
            return ast.BinOp(ast.Name(node.id, ast.Load()), ast.Add(),
                             ast.Name(_OFFSET_NAMES[node.id], ast.Load()))
        return node


def _shifted_mask_mod(mm, q_pos, k_pos):
    """The mask_mod ``mm`` (written on global positions) for a call whose local row 0 is global
    query q_pos and local key 0 is global key k_pos: the same expression with i + q_pos and
    j + k_pos, the offsets as int captures (one compiled kernel for every offset)."""
    from ..mask_mod import MaskMod
    used = [v for v in ("i", "j") if v in mm.uses()]
    if not used:
        return mm
    tree = _Shift().visit(ast.parse(mm.expr.strip(), mode="eval"))
    caps = dict(mm.arrays())
    caps.update(mm.ints())
    caps.update({_OFFSET_NAMES[v]: (q_pos if v == "i" else k_pos) for v in used})
    return MaskMod(ast.unparse(ast.fix_missing_locations(tree)), **caps)


def _check_mask_mod_room(mm):
    from ..mask_mod import MAX_INTS
    if mm is None:
        return
    clash = [n for n in _OFFSET_NAMES.values() if n in dict(mm.ints()) or n in dict(mm.arrays())]
    if clash:
        raise ValueError(f"mask_mod: ring_attention names its position offsets {clash[0]!r}; "
                         f"rename that capture")
    need = sum(v in mm.uses() for v in ("i", "j"))
    if len(mm.ints()) + need > MAX_INTS:
        raise ValueError(f"mask_mod {mm!r} has {len(mm.ints())} int captures; ring_attention "
                         f"adds {need} (the global positions of each call's first query and key) "
                         f"and a mask_mod takes at most {MAX_INTS}: fold an int into the "
                         f"expression as a literal")


def _agree(comm, what, record, error):
    """All-gather (record, error) from every rank; raise the same error on every rank if some
    rank's local checks failed or the records differ."""
    mine = None if error is None else [type(error).__name__, str(error)]
    got = comm.allgather({"record": record, "error": mine})
    n = len(got)
    bad = [(r, g["error"]) for r, g in enumerate(got) if g["error"] is not None]
    if bad:
        r0, (name, msg) = bad[0]
        others = [r for r, _ in bad[1:]]
        text = (f"{what}: rank {r0} of {n} rejected its input: {name}: {msg}"
                + (f" (ranks {others} failed too)" if others else ""))
        raise _ERRORS.get(name, RuntimeError)(text) from error
    for key in record:
        values = [g["record"].get(key) for g in got]
        if any(v != values[0] for v in values):
            desc = ", ".join(f"rank {r}: {v}" for r, v in enumerate(values))
            cls = TypeError if key in ("dtype", "array") else ValueError
            raise cls(f"{what}: the ranks disagree on {key} ({desc}); every rank must call "
                      f"it with the same shapes, dtype and settings")


@dataclasses.dataclass(frozen=True, eq=False)
class RingResiduals:
    """What :func:`ring_attention_backward` needs from :func:`ring_attention` on this rank: the
    local q (..., T, d), k, v (..., T, d), the merged out (lead..., T, d) and lse (lead..., T)
    (float32; float64 for float64), the communicator, the layout and every setting. References,
    not copies."""

    q: object
    k: object
    v: object
    out: object
    lse: object
    comm: object
    layout: str = "zigzag"
    causal: bool = False
    scale: float | None = None
    window: tuple | None = None
    softcap: float | None = None
    mask_mod: object = None
    tile: object = None


def _options_record(layout, causal, scale, window, softcap, mask_mod, tile):
    return {"layout": layout, "causal": causal if isinstance(causal, bool) else repr(causal),
            "scale": scale if scale is None or isinstance(scale, (int, float)) else repr(scale),
            "window": None if window is None else repr(window),
            "softcap": softcap if softcap is None or isinstance(softcap, (int, float))
            else repr(softcap),
            "mask_mod": None if mask_mod is None else repr(mask_mod),
            "tile": None if tile is None else repr(tile)}


def _local_checks(q, k, v, N, layout, causal, scale, window, softcap, alibi_slopes, mask_mod,
                  tile):
    """The Problem of this rank's inputs, and the global sequence length; raises what is wrong."""
    check_layout(layout)
    if alibi_slopes is not None:
        raise NotImplementedError(
            "alibi_slopes is not supported by ring_attention: the kernels' ALiBi distance "
            "|i + S - T - j| is taken in each call's own coordinates, and a key block off the "
            "diagonal needs global positions, whose difference adds a per-key term that no "
            "local call can express (it needs a position-offset argument in the kernels)")
    p = checks.check_qkv(q, k, v, causal=causal, scale=scale, window=window, softcap=softcap,
                         mask_mod=mask_mod)
    checks.check_tile(tile)
    if p.T != p.S:
        raise ValueError(f"ring_attention splits one sequence: q has {p.T} local rows and k, v "
                         f"have {p.S}; they must be equal (q.shape={tuple(q.shape)}, "
                         f"k.shape={tuple(k.shape)})")
    seq_len = p.T * N
    check_divisible(seq_len, N, layout)
    if mask_mod is not None:
        _check_mask_mod_room(mask_mod)
        if seq_len > 2**31 - 1:
            raise ValueError(f"mask_mod positions are int32: seq_len={seq_len} is too long")
    return p, seq_len


class _abort_on_failure:
    """Abort the communicator (when it can) if the ring fails on this rank after data started to
    move: its peers are inside a transfer with it and would otherwise wait for their time-out."""

    def __init__(self, comm):
        self.comm = comm

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if kind is not None and not isinstance(exc, CommError) and hasattr(self.comm, "abort"):
            self.comm.abort()
        return False


def _slice(x, a, b):
    return x[..., a:b, :]


def ring_attention(q, k, v, *, comm, causal=False, scale=None, layout="zigzag", window=None,
                   softcap=None, alibi_slopes=None, mask_mod=None, tile=None, return_lse=False,
                   return_residuals=False):
    """Exact attention over a sequence split across the ranks of ``comm`` (see module docstring).

    Every rank calls this with its own part of q, k, v.

    Parameters
    ----------
    q : array (..., T, d)
        This rank's queries: the rows ``cuflash.distributed.shard(q_global, N, rank, layout)``
        gives, T = L / N of a global sequence of L positions. NumPy (the CPU twin) or CuPy.
    k, v : arrays (..., T, d)
        This rank's keys and values, the same positions as q. Leading dims broadcast against
        q's as in ``cuflash.attention``: GQA is k, v of shape (B, H_kv, 1, T, d) with q of shape
        (B, H_kv, H / H_kv, T, d) (only the smaller k, v travel).
    comm : communicator
        ``SimulatedRing(N).comms[r]``, ``NcclComm.from_env()``, or any object with rank,
        world_size, shift and allgather (``cuflash.distributed.comm``).
    causal, window : as ``cuflash.attention``, on global positions (T = S = L): query i sees
        key j iff i - left <= j <= i + right (causal: j <= i).
    scale, softcap : as ``cuflash.attention`` (softcap acts on each score alone: no positions).
    layout : 'zigzag' (default; balanced for causal, L divisible by 2N) or 'contiguous'
        (L divisible by N).
    mask_mod : cuflash.MaskMod, optional
        Written on global positions: i and j in its expression are global query and key
        positions (captured arrays indexed by them hold the whole sequence's values, the same on
        every rank); b and h as in ``cuflash.attention``. Each call then covers globally
        contiguous rows; ring_attention adds two int captures (at most 2 of the user's own).
    alibi_slopes : not supported (NotImplementedError: the kernels need a position offset).
    tile : cuflash.TileConfig, optional
        Tile of every local forward call.
    return_lse, return_residuals : as ``cuflash.attention``; the residuals are a
        :class:`RingResiduals` for :func:`ring_attention_backward`.

    Returns
    -------
    out : (lead..., T, d) in q's dtype: this rank's rows of the global attention output.
    lse : (lead..., T) float32 (float64 for float64), -inf where a query sees no key.
    residuals : RingResiduals.
    """
    rank, N = check_comm(comm)
    error, p, seq_len = None, None, None
    try:
        p, seq_len = _local_checks(q, k, v, N, layout, causal, scale, window, softcap,
                                   alibi_slopes, mask_mod, tile)
        for name, flag in (("return_lse", return_lse), ("return_residuals", return_residuals)):
            if not isinstance(flag, (bool, np.bool_)):
                raise TypeError(f"{name} must be a bool, got {flag!r}")
    except Exception as exc:          # reported to every rank by _agree
        error = exc
    record = {"world_size": N,
              "array": None if p is None else ("numpy" if p.xp is np else "cupy"),
              "dtype": dtype_name(q.dtype) if hasattr(q, "dtype") else None,
              "q.shape": list(getattr(q, "shape", ())), "k.shape": list(getattr(k, "shape", ())),
              "v.shape": list(getattr(v, "shape", ())),
              **_options_record(layout, causal, scale, window, softcap, mask_mod, tile)}
    _agree(comm, "ring_attention", record, error)

    xp, acc = p.xp, accum_dtype(p.dtype)
    plan = ring_plan(seq_len, N, rank, layout, p.mask, contiguous_only=mask_mod is not None)
    mods = {}
    if mask_mod is not None:          # made before any kernel is queued (they check captures)
        for step in plan:
            for c in step:
                mods.setdefault((c.q_pos, c.k_pos),
                                _shifted_mask_mod(mask_mod, c.q_pos, c.k_pos))
    out_acc = xp.zeros(p.lead + (p.T, p.d), dtype=acc)
    lse_acc = xp.full(p.lead + (p.T,), -np.inf, dtype=acc)
    kv = [k, v]
    written = []                      # query row ranges merged into so far
    with _abort_on_failure(comm):
        for s in range(N):
            pending = comm.shift(kv) if s < N - 1 else None
            for c in plan[s]:
                o, l = api.attention(_slice(q, *c.q), _slice(kv[0], *c.k), _slice(kv[1], *c.k),
                                     scale=scale, softcap=softcap, tile=tile, return_lse=True,
                                     mask_mod=mods.get((c.q_pos, c.k_pos)),
                                     **c.attention_kwargs())
                if any(a < c.q[1] and c.q[0] < b for a, b in written):
                    merge_into(out_acc, lse_acc, o, l, rows=slice(*c.q))
                else:        # rows nothing wrote yet: the merge with (0, -inf) is (o, l) exactly
                    out_acc[..., c.q[0]:c.q[1], :] = o
                    lse_acc[..., c.q[0]:c.q[1]] = l
                written.append(c.q)
            if pending is not None:
                kv = pending.wait()
    out = out_acc.astype(p.dtype)
    res = RingResiduals(q, k, v, out, lse_acc, comm, layout, causal, scale, window, softcap,
                        mask_mod, tile)
    if not (return_lse or return_residuals):
        return out
    return (out,) + ((lse_acc,) if return_lse else ()) + ((res,) if return_residuals else ())


def ring_attention_backward(dout, residuals, *, tile=None, deterministic=True):
    """Gradients (dq, dk, dv) of ``sum(dout · ring_attention(q, k, v, ...))`` on this rank.

    dout : (lead..., T, d), this rank's rows of the output gradient, q's dtype and device.
    residuals : the :class:`RingResiduals` that ``ring_attention(..., return_residuals=True)``
        returned on this rank (every rank calls this together).
    tile, deterministic : as ``cuflash.attention_backward``, for every local backward call.

    Returns dq, dk, dv shaped and typed like this rank's q, k, v.
    """
    if not isinstance(residuals, RingResiduals):
        raise TypeError(f"residuals must be the RingResiduals of ring_attention(..., "
                        f"return_residuals=True), got {type(residuals).__name__}")
    r = residuals
    comm = r.comm
    rank, N = check_comm(comm)
    error, p = None, None
    try:
        p = checks.check_qkv(r.q, r.k, r.v, causal=r.causal, scale=r.scale, window=r.window,
                             softcap=r.softcap, mask_mod=r.mask_mod)
        checks.check_same("dout", dout, "the output", p.lead + (p.T, p.d), p.dtype, p.xp)
        checks.check_tile(tile)
        if not isinstance(deterministic, (bool, np.bool_)):
            raise TypeError(f"deterministic must be a bool, got {deterministic!r}")
    except Exception as exc:
        error = exc
    record = {"world_size": N, "dtype": dtype_name(r.q.dtype),
              "dout.shape": list(getattr(dout, "shape", ())),
              "deterministic": bool(deterministic) if isinstance(deterministic, (bool, np.bool_))
              else repr(deterministic),
              "backward tile": None if tile is None else repr(tile),
              "q.shape": list(r.q.shape), "k.shape": list(r.k.shape),
              **_options_record(r.layout, r.causal, r.scale, r.window, r.softcap, r.mask_mod,
                                r.tile)}
    _agree(comm, "ring_attention_backward", record, error)

    xp, acc = p.xp, accum_dtype(p.dtype)
    seq_len = p.T * N
    plan = ring_plan(seq_len, N, rank, r.layout, p.mask, contiguous_only=r.mask_mod is not None)
    mods = {}
    if r.mask_mod is not None:
        for step in plan:
            for c in step:
                mods.setdefault((c.q_pos, c.k_pos), _shifted_mask_mod(r.mask_mod, c.q_pos, c.k_pos))
    dq = xp.zeros(r.q.shape, dtype=acc)
    with _abort_on_failure(comm):
        kv = [r.k, r.v]
        done = None                      # (dk, dv) sums of the block held at the previous step
        for s in range(N):
            send = (kv if s < N - 1 else []) + (list(done) if done is not None else [])
            pending = comm.shift(send) if send else None
            dk = xp.zeros(r.k.shape, dtype=acc)
            dv = xp.zeros(r.v.shape, dtype=acc)
            for c in plan[s]:
                qs, ks = slice(*c.q), slice(*c.k)
                res = api.Residuals(_slice(r.q, *c.q), _slice(kv[0], *c.k), _slice(kv[1], *c.k),
                                    _slice(r.out, *c.q), r.lse[..., qs], scale=r.scale,
                                    softcap=r.softcap, mask_mod=mods.get((c.q_pos, c.k_pos)),
                                    **c.attention_kwargs())
                g_q, g_k, g_v = api.attention_backward(_slice(dout, *c.q), res, tile=tile,
                                                       deterministic=deterministic)
                dq[..., qs, :] += g_q
                dk[..., ks, :] += g_k
                dv[..., ks, :] += g_v
            if pending is not None:
                got = pending.wait()
                if s < N - 1:
                    kv, got = got[:2], got[2:]
                if s > 0:                # the sums of this block from the ranks before us
                    dk += got[0]
                    dv += got[1]
            done = (dk, dv)
        if N > 1:                        # the finished sums go to the block's owner
            dk, dv = comm.shift(list(done)).wait()
        else:
            dk, dv = done
    return dq.astype(r.q.dtype), dk.astype(r.k.dtype), dv.astype(r.v.dtype)


__all__ = ["ring_attention", "ring_attention_backward", "RingResiduals"]
