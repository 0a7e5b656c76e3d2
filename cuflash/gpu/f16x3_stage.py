"""float32 rows split once per call for the float16-product kernels (kernels_cu/flash_fwd_wgmma_x3.cu
and flash_bwd_wgmma_x3.cu; 'highest' three products a pair, 'tf32' one).

Precision 'highest' on sm_90 runs each float32 operand as two float16 parts, x·2^e = hi + lo
(kernels_cu/f16x3.cuh): 2^e a power of two putting the block's largest |x| into [2^13, 2^14).
Every query block reads every K and V tile it visits, so the split is made once, before the
launch, for each (sequence, kv head); the kernel's producer then only copies 16-bit tiles. With
DP the kernel's padded head dim and S_pad = S rounded up to the tile's block_n, each staged row
is DP + 4 floats (``ROW_PAD`` = 4), read as float16 in its first 2·DP + 8 halves:

    halves [0, DP)        hi = f16(x·2^e)        (zeros past d)
    halves [DP, 2·DP)     lo = f16(x·2^e - hi)
    float  DP             K: 1 / 2^e (2^e from the row's largest |k|)
                          V: 1 / (2^e · 2^14) (2^e from the largest |v| of the row's key tile of
                          block_n keys from key 0; 2^14: the kernel's factor on P, kX3PScale)
    floats DP+1..DP+3     0

'tf32' (``lo=False``: its one product reads hi alone) stages no lo part: its rows are DP / 2 + 4
floats, hi in halves [0, DP) and the inverse at float DP / 2 (f16x3.cuh ``StagedRow``).
Rows past S are zeros (a K row's inverse 1, f16_range_scale of 0). The backward stages q and
dout, k and v, every row scaled on its own as K's (``backward_fields``). The GPU makes them with
kernels_cu/f16x3_stage.cuh (``staged_run``); ``staged`` is the same rule in array operations, the
reference the tests hold that kernel to. The staged arrays cost one copy of k and of v (plus 16
bytes a row) for the duration of the call.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..tile import F16_SPLIT
from .tf32_stage import padded_keys

#: floats after a row's hi and lo: its inverse scale, then zeros (16-byte rows)
ROW_PAD = 4
#: the x3 forward's factor on P before its split (f16x3.cuh kX3PScale), folded into V's inverse
P_SCALE = 16384.0


def carries_lo(kernel: str) -> bool:
    """Whether a float16-product family's staged rows hold lo parts (tile.F16_SPLIT: more than
    one product a pair; f16x3.cuh F16Products::kLo)."""
    return F16_SPLIT[kernel] > 1


def row_floats(dp: int, lo: bool = True) -> int:
    """Floats of one staged row at padded head dim dp, with lo parts or without."""
    return (dp if lo else dp // 2) + ROW_PAD


def range_scale(m):
    """f16x3.cuh's f16_range_scale, elementwise on float32 maxima m >= 0 (NumPy): 2^e with
    m·2^e in [2^13, 2^14), e clamped to float32's normal exponents; 1 where m is 0 or not finite."""
    m = np.asarray(m, np.float32)
    E = ((m.view(np.uint32) >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64)
    e = np.clip(13 - (np.maximum(E, 1) - 127), -126, 127)
    s = ((e + 127).astype(np.uint32) << np.uint32(23)).view(np.float32)
    return np.where((m == 0) | (E == 255), np.float32(1), s).astype(np.float32)


def _rows(x, scale, inv, dp, lo=True):
    """Staged rows (..., rows, row_floats(dp, lo)) float32 of x (..., rows, d) times scale (...,
    rows, 1), each with its inverse inv (..., rows)."""
    *lead, rows, d = x.shape
    out = np.zeros((*lead, rows, row_floats(dp, lo)), np.float32)
    a = np.zeros((*lead, rows, dp), np.float32)
    a[..., :d] = x * scale
    hi = a.astype(np.float16)
    halves = out.view(np.float16)
    halves[..., :dp] = hi
    if lo:
        halves[..., dp:2 * dp] = (a - hi.astype(np.float32)).astype(np.float16)
    out[..., row_floats(dp, lo) - ROW_PAD] = inv
    return out


def staged(k, v, block_n: int, dp: int, v_tile: bool = True, pad: int | None = None,
           lo: bool = True):
    """(ks, vs) of k, v (sequences, heads, S, d) float32 (NumPy): (sequences, heads, S_pad,
    row_floats(dp, lo)) float32 each, C-contiguous (the module docstring), S_pad = S rounded up
    to `pad` rows (default block_n). v_tile=False: v's rows scaled one by one as k's (the
    backward's pairs: q and dout, k and v), inverses without P's factor. lo=False: hi alone
    ('tf32')."""
    k = np.asarray(k, np.float32)
    v = np.asarray(v, np.float32)
    B, H, S, d = k.shape
    pad = block_n if pad is None else pad
    if v.shape != k.shape:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must have one shape")
    if block_n % 16 or dp % 64 or d > dp or pad % block_n:
        raise ValueError(f"block_n={block_n} must be a multiple of 16, dp={dp} a multiple of 64 "
                         f"no smaller than d={d}, pad={pad} a multiple of block_n")
    S_pad = padded_keys(S, pad)
    kp = np.zeros((B, H, S_pad, d), np.float32)
    vp = np.zeros((B, H, S_pad, d), np.float32)
    kp[:, :, :S], vp[:, :, :S] = k, v

    def per_row(x):
        s = range_scale(np.abs(x).max(axis=-1, initial=0))[..., None]
        return _rows(x, s, (1 / s[..., 0]).astype(np.float32), dp, lo)

    if not v_tile:
        return per_row(kp), per_row(vp)
    tiles = np.abs(vp).reshape(B, H, S_pad // block_n, block_n * d).max(axis=-1, initial=0)
    vs_scale = np.repeat(range_scale(tiles), block_n, axis=-1)[..., None]
    vs = _rows(vp, vs_scale, (1 / (vs_scale[..., 0] * np.float32(P_SCALE))).astype(np.float32), dp,
               lo)
    return per_row(kp), vs


def stage_pair(a, b, rows: int, dp: int, b_tile: bool = True, pad: int | None = None,
               lo: bool = True):
    """staged(a, b, rows, dp, b_tile, pad, lo) on the GPU (kernels_cu/f16x3_stage.cuh): a, b
    CuPy float32 (sequences, heads, N, d) of one shape, any strides; new C-contiguous arrays."""
    import cupy as cp
    from . import build, views
    from .ops import _empty   # (NaN-filled under ops.poisoned_outputs: every element is written)
    B, H, N, D = a.shape
    N_pad = padded_keys(N, rows if pad is None else pad)
    known = build.F16X3_STAGE_SHAPES if b_tile else {(build.F16X3_STAGE_ROWS, d)
                                                     for d in build.F16X3_STAGE_ROW_DIMS}
    if (rows, dp) not in known or D > dp or B * H > 65535 or N_pad % rows:
        raise ValueError(f"the x3 kernels stage (rows, padded head dim) in {sorted(known)} "
                         f"(b_tile={b_tile}) and at most 65535 (sequence, head) pairs; got "
                         f"rows={rows}, dp={dp}, d={D}, pad={pad}, {B * H} pairs")
    sa = _empty((B, H, N_pad, row_floats(dp, lo)), np.float32)
    sb = _empty((B, H, N_pad, row_floats(dp, lo)), np.float32)
    if B * H:
        fn = build.get_f16x3_stage(cp.cuda.Device().id, rows, dp, b_tile, lo)
        ast, bst = views.strides(a), views.strides(b)
        fn((N_pad // rows, B * H), (build.F16X3_STAGE_THREADS,),
           (a, b, *(np.int64(x) for x in ast), *(np.int64(x) for x in bst), np.int32(H),
            np.int32(N), np.int32(N_pad), np.int32(D), sa, sb))
    return sa, sb


def staged_run(r, block_n: int, dp: int, lo: bool = True):
    """A forward run (ops._Run) with its k and v replaced by their staged rows (ks, vs): the
    launch reads their strides as K's and V's."""
    ks, vs = stage_pair(r.k, r.v, block_n, dp, lo=lo)
    return dataclasses.replace(r, k=ks, v=vs)


def backward_fields(r, dout, dp: int, tiles, lo: bool = True) -> dict:
    """The backward parameter fields (params.cuh CUFLASH_BWD_FIELDS) of the float16-product
    pair's inputs: q, k, v and dout (r.q, r.k, r.v of an ops._Run) replaced by their staged rows
    (``lo``: with lo parts), every row scaled on its own, padded to whole tiles of both kernels
    (`tiles`: their TileConfigs), with their strides. The preprocess (D = rowsum(dO ∘ O)) reads
    the float32 dout, so it runs before."""
    pad_q = math.lcm(*(t.block_m for t in tiles))
    pad_k = math.lcm(*(t.block_n for t in tiles))
    from . import build, views
    rows = build.F16X3_STAGE_ROWS
    q, do = stage_pair(r.q, dout, rows, dp, b_tile=False, pad=pad_q, lo=lo)
    k, v = stage_pair(r.k, r.v, rows, dp, b_tile=False, pad=pad_k, lo=lo)
    return dict(q=q, k=k, v=v, dout=do, q_stride=views.strides(q), k_stride=views.strides(k),
                v_stride=views.strides(v), dout_stride=views.strides(do))
