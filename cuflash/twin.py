"""CPU tiled twin: FlashAttention-2's algorithm in NumPy, tile by tile, as the kernels run it.

Read it beside ``kernels_cu/flash_fwd.cu`` and ``kernels_cu/flash_bwd.cu``: the same names
(block_m, block_n, m, l, lse, D), the same loop bounds, the same causal skipping, the same rounding
of P and dS to the input dtype before the matrix products that consume them. Tensors are
(batch, T, d) for queries, (batch, S, d) for keys and (batch, S, d_v) for values (any head dims
from 1; d_v may differ from d); the batch is vectorized, the tiles are loops.

Every load from and store to the input and output arrays goes through a :class:`ByteCounter`,
so the twin measures the device-memory traffic the IO model (``cuflash.iomodel``) predicts.

Precision: float16/bfloat16/float32 inputs accumulate in float32; float64 inputs in float64.
Which keys a query sees is ``cuflash.mask.Mask`` (causal, sliding windows), at the level of
elements (``visible``) and of tiles (``key_tiles``, ``query_tiles``, ``tile_needs_mask``): the
kernels read the same rule from ``kernels_cu/mask.cuh``.
"""
from __future__ import annotations

import collections

import numpy as np

from . import scores
from ._xp import accum_dtype
from .mask import Mask, split_share
from .precision import matmul


class ByteCounter:
    """Bytes loaded from and stored to named arrays in device memory (here: NumPy arrays)."""

    def __init__(self):
        self.read = collections.Counter()
        self.written = collections.Counter()

    def load(self, name, a, acc):
        self.read[name] += a.nbytes
        return a.astype(acc)

    def store(self, name, dst, index, value):
        dst[index] = value
        self.written[name] += dst[index].nbytes

    def spill(self, name, a):
        """An intermediate written to device memory and read back once (split-KV's partials)."""
        self.written[name] += a.nbytes
        self.read[name] += a.nbytes

    def add(self, name, dst, index, value):
        """Read-modify-write of dst[index] (the atomic dQ accumulation of the kernels)."""
        self.read[name] += dst[index].nbytes
        dst[index] += value
        self.written[name] += dst[index].nbytes

    @property
    def bytes_read(self) -> int:
        return sum(self.read.values())

    @property
    def bytes_written(self) -> int:
        return sum(self.written.values())


def _round(x, dtype, acc):
    """Round to the input dtype and back, as the kernels do before a tensor-core product."""
    return x.astype(dtype).astype(acc) if np.dtype(dtype).itemsize < 4 else x


class TileScores:
    """What happens to one tile's scores between Q·Kᵀ and the softmax, as the kernels do it:
    scale, the score modifiers (``cuflash.scores``: softcap, ALiBi), then the mask (the band of
    ``cuflash.mask.Mask`` and a custom ``mask_mod``), -inf where hidden. Tiles the band does not
    cut skip the per-element rule (the kernels' tile_needs_mask); tiles a mask_mod hides for
    every batch entry are skipped whole (``empty``)."""

    def __init__(self, B, T, S, acc, *, mask: Mask, scale, softcap=None, slopes=None,
                 mask_mod=None, heads=1):
        self.T, self.S, self.acc, self.mask, self.mask_mod = T, S, acc, mask, mask_mod
        self.scale, self.softcap = acc.type(scale), softcap
        self.slopes = None if slopes is None else np.asarray(slopes, dtype=acc).reshape(B, 1, 1)
        bz = np.arange(B)
        self.b, self.h = (bz // heads)[:, None, None], (bz % heads)[:, None, None]

    def _mod(self, i0, i1, j0, j1):
        i = np.arange(i0, i1)[None, :, None]
        j = np.arange(j0, j1)[None, None, :]
        return self.mask_mod.evaluate(self.b, self.h, i, j)

    def empty(self, i0, i1, j0, j1) -> bool:
        """True when a mask_mod hides every pair of the tile for every batch entry."""
        return self.mask_mod is not None and not self._mod(i0, i1, j0, j1).any()

    def __call__(self, s, i0, i1, j0, j1, grad=False):
        """Masked, modified scores of the raw tile s = Q_i K_jᵀ (B, i1-i0, j1-j0); with grad also
        d s_out / d s_in of the softcap (None without one)."""
        i = np.arange(i0, i1)[:, None]
        j = np.arange(j0, j1)[None, :]
        s, g = scores.modify(s * self.scale, i, j, self.T, self.S, softcap=self.softcap,
                             slopes=self.slopes, grad=True)
        if self.mask.tile_needs_mask(i0, i1, j0, j1, self.T, self.S) or self.mask_mod is not None:
            seen = self.mask.visible(i, j, self.T, self.S)
            if self.mask_mod is not None:
                seen = seen & self._mod(i0, i1, j0, j1)
            s = np.where(seen, s, -np.inf)
        return (s, g) if grad else s


def forward(q, k, v, *, mask: Mask, scale, block_m, block_n, counter=None, num_splits=1,
            precision="ieee", **score_mods):
    """out (batch, T, d_v) in q's dtype and lse (batch, T) in the accumulation dtype.

    Algorithm 1 of FlashAttention-2: for each Q tile, stream K/V tiles, keep the running row max
    m and row sum l, rescale the accumulator, divide by l once at the end. ``score_mods``:
    softcap, slopes (ALiBi, (batch,)), mask_mod and heads, as :class:`TileScores` takes them.
    ``num_splits`` > 1 is split-KV as the kernels run it: each split of a Q tile's K/V tiles
    (mask.split_share) ends with its own O_s = o / l and lse_s, kept in the accumulation dtype
    (the kernels' float partials), then merged: lse = log Σ e^{lse_s}, O = Σ e^{lse_s - lse} O_s
    (kernels_cu/split_combine.cuh). ``precision``: how float32's two products are computed
    (``cuflash.precision.matmul``: 'ieee', or TF32 as the kernels' 'tf32' and 'highest').
    """
    counter = counter or ByteCounter()
    B, T, d = q.shape
    S, d_v = k.shape[1], v.shape[2]
    dt, acc = q.dtype, accum_dtype(q.dtype)
    tile_scores = TileScores(B, T, S, acc, mask=mask, scale=scale, **score_mods)
    out = np.empty((B, T, d_v), dtype=dt)
    lse = np.empty((B, T), dtype=acc)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i0 in range(0, T, block_m):
            i1 = min(T, i0 + block_m)
            tiles = list(mask.key_tiles(i0, i1, T, S, block_n))
            parts = []
            for s_ in range(num_splits):                                # each split loads Q_i
                q_i = counter.load("q", q[:, i0:i1], acc)               # (B, bm, d)
                m = np.full((B, i1 - i0), -np.inf, dtype=acc)           # running max
                l = np.zeros((B, i1 - i0), dtype=acc)                   # running sum
                o = np.zeros((B, i1 - i0, d_v), dtype=acc)              # unnormalized output
                for j0 in (tiles[t] for t in split_share(len(tiles), s_, num_splits)):
                    j1 = min(S, j0 + block_n)
                    if tile_scores.empty(i0, i1, j0, j1):
                        continue
                    k_j = counter.load("k", k[:, j0:j1], acc)           # (B, bn, d)
                    v_j = counter.load("v", v[:, j0:j1], acc)
                    # -- S_ij = score_mod(scale · Q_i K_jᵀ), -inf where the mask hides it
                    s = tile_scores(matmul(q_i, k_j.transpose(0, 2, 1), precision),
                                    i0, i1, j0, j1)
                    # -- update m and l; rows that have seen no key yet keep m = -inf, use 0
                    #    (the float64 and 16-bit wgmma forwards move m only when exp(tile max
                    #    - m) > 2^8, and skip alpha and O's rescaling otherwise: the same O and
                    #    lse up to rounding; kernels_cu/softmax.cuh, OnlineSoftmax's SLACK)
                    m_new = np.maximum(m, s.max(axis=-1))
                    m_safe = np.where(m_new == -np.inf, 0, m_new).astype(acc)
                    p = np.exp(s - m_safe[..., None])                   # P_ij
                    alpha = np.exp(m - m_safe)                          # rescales old l and o
                    l = alpha * l + p.sum(axis=-1)
                    o = alpha[..., None] * o + matmul(_round(p, dt, acc), v_j, precision)
                    m = m_new
                # -- O_i = o / l, lse_i = m + log l (rows that saw no key: O = 0, lse = -inf)
                parts.append((np.where(l[..., None] == 0, 0, o / l[..., None]).astype(acc),
                              (m + np.log(l)).astype(acc)))
                if num_splits > 1:   # O_s and lse_s to the float partials, read by the merge
                    counter.spill("out_accum", parts[-1][0])
                    counter.spill("lse_accum", parts[-1][1])
            o_i, lse_i = parts[0] if num_splits == 1 else _merge_splits(parts, acc)
            counter.store("out", out, (slice(None), slice(i0, i1)), o_i.astype(dt))
            counter.store("lse", lse, (slice(None), slice(i0, i1)), lse_i)
    return out, lse


def _merge_splits(parts, acc):
    """Split-KV's merge of [(O_s, lse_s)]: lse = log Σ e^{lse_s}, O = Σ e^{lse_s - lse} O_s (a
    split that saw no key weighs 0; a row that saw none keeps O = 0, lse = -inf)."""
    lses = np.stack([lse_s for _, lse_s in parts])                      # (splits, B, bm)
    m = lses.max(axis=0)
    m_safe = np.where(m == -np.inf, 0, m).astype(acc)
    total = np.exp(lses - m_safe).sum(axis=0)
    lse = np.where(total == 0, -np.inf, m_safe + np.log(total)).astype(acc)
    lse_safe = np.where(lse == -np.inf, 0, lse)
    o = sum(np.exp(lse_s - lse_safe)[..., None] * o_s for o_s, lse_s in parts)
    return np.where(total[..., None] == 0, 0, o).astype(acc), lse


def backward(dout, q, k, v, out, lse, *, mask: Mask, scale, block_m, block_n, deterministic=True,
             counter=None, precision="ieee", **score_mods):
    """(dq, dk, dv), each shaped and typed like its input; P is recomputed from q, k and lse.

    Algorithm 2 of FlashAttention-2: D = rowsum(dO ∘ O) first; then, for each K/V tile, stream
    the Q/dO tiles, recompute P = exp(S - lse), accumulate dV and dK in place. dQ is summed either
    by a read-modify-write per (Q tile, K/V tile) pair into a float accumulator (the kernels'
    atomic mode, ``deterministic=False``) or by a second pass with one Q tile resident that loops
    over K/V tiles (``deterministic=True``: a fixed summation order, more recomputation).
    ``score_mods`` and ``precision`` (its five products) as in :func:`forward`.
    """
    counter = counter or ByteCounter()
    B, T, d = q.shape
    S, d_v = k.shape[1], v.shape[2]
    dt, acc = q.dtype, accum_dtype(q.dtype)
    sc = acc.type(scale)
    tile_scores = TileScores(B, T, S, acc, mask=mask, scale=scale, **score_mods)
    dq = np.empty((B, T, d), dtype=dt)
    dk = np.empty((B, S, d), dtype=dt)
    dv = np.empty((B, S, d_v), dtype=dt)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # -- preprocess: D_i = rowsum(dO_i ∘ O_i)
        D = np.empty((B, T), dtype=acc)
        for i0 in range(0, T, block_m):
            i1 = min(T, i0 + block_m)
            prod = counter.load("dout", dout[:, i0:i1], acc) * counter.load("out", out[:, i0:i1], acc)
            counter.store("D", D, (slice(None), slice(i0, i1)), prod.sum(axis=-1))
        dq_acc = None
        if not deterministic:
            dq_acc = np.empty((B, T, d), dtype=acc)
            counter.store("dq_accum", dq_acc, Ellipsis, 0)

        def recompute(q_i, k_j, v_j, do_i, lse_i, D_i, i0, j0):
            """P_ij and dS_ij of one tile pair, from Q_i, K_j, lse_i (no stored P)."""
            s, g = tile_scores(matmul(q_i, k_j.transpose(0, 2, 1), precision), i0,
                               i0 + q_i.shape[1], j0, j0 + k_j.shape[1], grad=True)
            lse_safe = np.where(lse_i == -np.inf, np.inf, lse_i)   # rows that saw no key: P = 0
            p = np.exp(s - lse_safe[..., None])
            dp = matmul(do_i, v_j.transpose(0, 2, 1), precision)    # dP_ij = dO_i V_jᵀ
            ds = p * (dp - D_i[..., None])                          # dS_ij = P ∘ (dP - D)
            return p, ds if g is None else ds * g                   # · d softcap / d s

        # -- main pass: one K/V tile resident, Q/dO tiles streamed
        for j0 in range(0, S, block_n):
            j1 = min(S, j0 + block_n)
            k_j = counter.load("k", k[:, j0:j1], acc)
            v_j = counter.load("v", v[:, j0:j1], acc)
            dk_j = np.zeros((B, j1 - j0, d), dtype=acc)
            dv_j = np.zeros((B, j1 - j0, d_v), dtype=acc)
            for i0 in mask.query_tiles(j0, j1, T, S, block_m):
                i1 = min(T, i0 + block_m)
                if tile_scores.empty(i0, i1, j0, j1):
                    continue
                q_i = counter.load("q", q[:, i0:i1], acc)
                do_i = counter.load("dout", dout[:, i0:i1], acc)
                lse_i = counter.load("lse", lse[:, i0:i1], acc)
                D_i = counter.load("D", D[:, i0:i1], acc)
                p, ds = recompute(q_i, k_j, v_j, do_i, lse_i, D_i, i0, j0)
                # dV_j += P_ijᵀ dO_i, dK_j += dS_ijᵀ Q_i
                dv_j += matmul(_round(p, dt, acc).transpose(0, 2, 1), do_i, precision)
                ds_r = _round(ds, dt, acc)
                dk_j += matmul(ds_r.transpose(0, 2, 1), q_i, precision)
                if not deterministic:                                    # dQ_i += dS_ij K_j
                    counter.add("dq_accum", dq_acc, (slice(None), slice(i0, i1)),
                                matmul(ds_r, k_j, precision) * sc)
            counter.store("dk", dk, (slice(None), slice(j0, j1)), (dk_j * sc).astype(dt))
            counter.store("dv", dv, (slice(None), slice(j0, j1)), dv_j.astype(dt))

        if not deterministic:
            # -- convert the float accumulator to the input dtype
            counter.store("dq", dq, Ellipsis, counter.load("dq_accum", dq_acc, acc).astype(dt))
            return dq, dk, dv
        # -- dQ pass: one Q tile resident, K/V tiles streamed (as the forward)
        for i0 in range(0, T, block_m):
            i1 = min(T, i0 + block_m)
            q_i = counter.load("q", q[:, i0:i1], acc)
            do_i = counter.load("dout", dout[:, i0:i1], acc)
            lse_i = counter.load("lse", lse[:, i0:i1], acc)
            D_i = counter.load("D", D[:, i0:i1], acc)
            dq_i = np.zeros((B, i1 - i0, d), dtype=acc)
            for j0 in mask.key_tiles(i0, i1, T, S, block_n):
                j1 = min(S, j0 + block_n)
                if tile_scores.empty(i0, i1, j0, j1):
                    continue
                k_j = counter.load("k", k[:, j0:j1], acc)
                v_j = counter.load("v", v[:, j0:j1], acc)
                _, ds = recompute(q_i, k_j, v_j, do_i, lse_i, D_i, i0, j0)
                dq_i += matmul(_round(ds, dt, acc), k_j, precision)
            counter.store("dq", dq, (slice(None), slice(i0, i1)), (dq_i * sc).astype(dt))
    return dq, dk, dv
