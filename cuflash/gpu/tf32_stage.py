"""K and Vᵀ staged for the TF32 wgmma forward (kernels_cu/flash_fwd_wgmma_tf32.cu).

wgmma reads float32 operands as TF32 only K-major (the reduced axis contiguous) and by
truncating them, where precision 'tf32' rounds to nearest (``cuflash.precision.tf32``). Q·Kᵀ
reduces over the head dim, which q and k hold contiguous; P·V reduces over the keys, which v
does not. So before the launch, for each (sequence, kv head), with S_pad = S rounded up to the
tile's block_n (the kernel loads whole tiles; keys past S are zero, and masked):

    kr[b, h, j, c]          = tf32(k[b, h, j, c])                  (0 for S <= j < S_pad)
    vt[b, h, c, 8u + s]     = tf32(v[b, h, 8u + KEY_OF_SLOT[s], c])  (0 past S)

KEY_OF_SLOT is the order in which the kernel's P fragments hold each 8 keys: its S accumulator
gives thread (g, t) keys 2t and 2t + 1 of an 8-key n-tile, which go into the m16n8k8 A fragment
as k-slots t and t + 4 (kernels_cu/tf32.cuh), so Vᵀ holds key 2t at slot t and 2t + 1 at t + 4.
The kernel rounds its Q tile itself (once per block, in shared memory). On the GPU one kernel
stages both in a pass over k and v (kernels_cu/tf32_stage.cuh, ``staged_run``); ``staged`` is
the same rule in array operations, the reference the tests hold that kernel to. The staged
arrays cost one copy of k and of v for the duration of the call.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..precision import tf32

#: k-slot s of an 8-key step of P·V holds key KEY_OF_SLOT[s] of the 8 (slot t: key 2t, slot
#: t + 4: key 2t + 1)
KEY_OF_SLOT = (0, 2, 4, 6, 1, 3, 5, 7)


def padded_keys(S: int, block_n: int) -> int:
    """S rounded up to a whole number of block_n-key tiles (at least one)."""
    return max(1, -(-S // block_n)) * block_n


def staged(k, v, block_n: int, xp=np):
    """(kr, vt) of k, v (sequences, kv heads, S, D) float32: kr (sequences, kv heads, S_pad, D)
    and vt (sequences, kv heads, D, S_pad), both C-contiguous (the module docstring)."""
    B, H, S, D = k.shape
    if v.shape != k.shape:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must have one shape")
    if block_n % 8:
        raise ValueError(f"block_n={block_n} must be a multiple of 8 (P·V's k-steps)")
    S_pad = padded_keys(S, block_n)
    kr = xp.zeros((B, H, S_pad, D), np.float32)
    kr[:, :, :S] = tf32(k, xp)
    vr = xp.zeros((B, H, S_pad, D), np.float32)
    vr[:, :, :S] = tf32(v, xp)
    steps = vr.reshape(B, H, S_pad // 8, 8, D)[:, :, :, list(KEY_OF_SLOT), :]
    vt = xp.ascontiguousarray(steps.transpose(0, 1, 4, 2, 3)).reshape(B, H, D, S_pad)
    return kr, vt


def staged_run(r, block_n: int):
    """A forward run (ops._Run) with its k and v replaced by their staged forms (kr, vt), made by
    kernels_cu/tf32_stage.cuh: the launch then reads kr's strides as K's and vt's [sequence,
    head, row] strides as Vᵀ's [sequence, head, head-dim row] (flash_fwd_wgmma_tf32.cu)."""
    import cupy as cp
    from . import build, views
    from .ops import _empty   # (NaN-filled under ops.poisoned_outputs: every element is written)
    B, H, S, D = r.k.shape
    S_pad = padded_keys(S, block_n)
    if D > build.TF32_STAGE_WIDE_D or S_pad % build.TF32_STAGE_KEYS or B * H > 65535:
        raise ValueError(f"the TF32 wgmma forward stages head dims up to "
                         f"{build.TF32_STAGE_WIDE_D}, {build.TF32_STAGE_KEYS} keys a block and "
                         f"at most 65535 (sequence, kv head) pairs; got d={D}, "
                         f"block_n={block_n}, {B * H} pairs")
    max_d = build.tf32_stage_dim(D)
    kr = _empty((B, H, S_pad, D), np.float32)
    vt = _empty((B, H, D, S_pad), np.float32)
    if B * H:
        fn = build.get_tf32_stage(cp.cuda.Device().id, max_d)
        ks, vs = views.strides(r.k), views.strides(r.v)
        fn((S_pad // build.TF32_STAGE_KEYS, B * H), (build.TF32_STAGE_THREADS,),
           (r.k, r.v, *(np.int64(x) for x in ks), *(np.int64(x) for x in vs), np.int32(H),
            np.int32(S), np.int32(S_pad), np.int32(D), kr, vt))
    return dataclasses.replace(r, k=kr, v=vt)
