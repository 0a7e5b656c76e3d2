"""Helpers of the issue-12 tests (GQA, varlen, head dims, layouts).

The CUDA path's glue on the CPU: ``kernel_route`` makes cuflash.api send NumPy arrays down the
GPU route (``api._forward3`` / ``api._backward3``: head dims padded for the kernels, outputs
sliced back), to a stand-in for ``cuflash.gpu.ops`` that checks what the kernels would be handed
(C-contiguous (batch, n, D) arrays, one head dim D of KERNEL_HEAD_DIMS for q, k and v, a kernel
spec that plan.validate accepts on sm_90) and then runs the CPU twin on them. So the copies,
pads and slices of the GPU path are tested here, without a GPU; the kernels themselves are
tested on the GPU (the xp fixture's CuPy cases)."""
import contextlib

import numpy as np

from cuflash import api, twin
from cuflash._xp import dtype_name
from cuflash.checks import KERNEL_HEAD_DIMS
from cuflash.gpu import ops, plan

ARCH = "sm_90"


class FakeOps:
    """cuflash.gpu.ops's interface, run by the twin; records the head dims it was handed."""

    def __init__(self):
        self.calls = []

    @staticmethod
    def smem_limit():
        return plan.SMEM_LIMIT[ARCH]

    @staticmethod
    def device_arch():
        return ARCH

    def _handed(self, p, tile, backward, deterministic, *arrays):
        D = arrays[0].shape[-1]
        for a in arrays:
            assert isinstance(a, np.ndarray) and a.flags.c_contiguous and a.ndim == 3, a.shape
        assert {a.shape[-1] for a in arrays if a.ndim == 3} == {D}, [a.shape for a in arrays]
        assert D in KERNEL_HEAD_DIMS, D
        for spec in ops._specs(dtype_name(arrays[0].dtype), D, tile, ops.variant_of(p), backward,
                               deterministic):
            plan.validate(spec, self.smem_limit(), ARCH)
        self.calls.append(("backward" if backward else "forward", D))

    def forward(self, q, k, v, p, *, tile):
        self._handed(p, tile, False, True, q, k, v)
        return twin.forward(q, k, v, mask=p.mask, scale=p.scale, block_m=tile.block_m,
                            block_n=tile.block_n, **api._score_mods(p))

    def backward(self, dout, q, k, v, out, lse, p, *, tile, deterministic):
        self._handed(p, tile, True, deterministic, dout, q, k, v, out)
        return twin.backward(dout, q, k, v, out, lse, mask=p.mask, scale=p.scale,
                             block_m=tile.block_m, block_n=tile.block_n,
                             deterministic=deterministic, **api._score_mods(p))


@contextlib.contextmanager
def kernel_route():
    """Within this block NumPy arrays take the GPU route to a FakeOps (yielded)."""
    fake = FakeOps()
    saved = api._backend
    api._backend = lambda xp: fake
    try:
        yield fake
    finally:
        api._backend = saved


# -- the oracle criterion, forward and backward, dense and packed --------------------------------

#: Rows of at most this many entries are measured a head at a time. The criterion's row measure
#: (helpers.ROW_KINDS: each row of out and dv against its own norm) holds a row to the rounding
#: of that row; a row of 1-3 entries averaging zero-mean values cancels, now and then, far
#: below the values averaged, and then measures the rounding of P (u times the values) against
#: a number near 0: at d_v = 1 in float16 the twin's worst row is 27 u (naive's 78 u) while its
#: max error is 0.7 u of max |out|; 5.4 u at d_v = 2, 2.6 u at d_v = 4 (37 queries, 45 keys, 4
#: seeds). So out and dv with d_v <= 3 are handed to the criterion with each head's rows joined
#: into one row (the -inf, max, normwise and bias checks see the same numbers).
SHORT_ROW = 3


def _rows(x, kind):
    """x as the criterion sees it (``SHORT_ROW``)."""
    if kind in ("out", "dv") and x.ndim >= 2 and x.shape[-1] <= SHORT_ROW:
        return x.reshape(tuple(x.shape[:-2]) + (-1,))
    return x


def _criterion(got, ref, naive, *, dtype, name, kind, floor_scale=None):
    from helpers import assert_matches_oracle
    from cuflash._xp import to_numpy

    got, ref, naive = (_rows(to_numpy(x), kind) for x in (got, ref, naive))
    assert_matches_oracle(got, ref, naive, dtype=dtype, name=name, kind=kind,
                          floor_scale=floor_scale)

def check_dense(xp, q, k, v, dout, *, dtype, name, fwd_tile=None, bwd_tile=None,
                dets=(True,), **kw):
    """attention and attention_backward (each dQ mode in ``dets``) against the float64 oracle
    (assert_matches_oracle, naive in the same precision as the yardstick). Returns
    (out, lse, {det: grads})."""
    import cuflash
    from cuflash.oracle import oracle_attention, oracle_backward
    from helpers import grad_scale

    ref_out, ref_lse = oracle_attention(q, k, v, **kw)
    out, lse, res = cuflash.attention(q, k, v, tile=fwd_tile, return_lse=True,
                                      return_residuals=True, **kw)
    naive_out, naive_lse = cuflash.naive_attention(q, k, v, return_lse=True, **kw)
    assert out.flags.c_contiguous
    _criterion(out, ref_out, naive_out, dtype=dtype, name=f"out {name}", kind="out")
    _criterion(lse, ref_lse, naive_lse, dtype=dtype, name=f"lse {name}", kind="lse")
    refs = oracle_backward(dout, q, k, v, **kw)
    naive = cuflash.naive_attention_backward(dout, q, k, v, **kw)
    grads = {}
    for det in dets:
        g = cuflash.attention_backward(dout, res, tile=bwd_tile, deterministic=det)
        for x, gx, r, n, gname in zip((q, k, v), g, refs, naive, ("dq", "dk", "dv")):
            assert gx.shape == x.shape and gx.dtype == x.dtype and gx.flags.c_contiguous, gname
            _criterion(gx, r, n, dtype=dtype, name=f"{gname} {name} (det={det})", kind=gname,
                       floor_scale=grad_scale(*refs))
        grads[det] = g
    return out, lse, grads


def check_varlen(xp, q, k, v, cu_q, cu_k, dout, *, dtype, name, tile=None, bwd_tile=None,
                 dets=(True,), **kw):
    """attention_varlen and attention_varlen_backward against the float64 oracle, as
    check_dense. Returns (out, lse, {det: grads})."""
    import cuflash
    from cuflash.oracle import oracle_attention_varlen, oracle_backward_varlen
    from helpers import grad_scale

    ref_out, ref_lse = oracle_attention_varlen(q, k, v, cu_q, cu_k, **kw)
    out, lse, res = cuflash.attention_varlen(q, k, v, cu_q, cu_k, tile=tile, return_lse=True,
                                             return_residuals=True, **kw)
    naive_out, naive_lse = cuflash.naive_attention_varlen(q, k, v, cu_q, cu_k, return_lse=True,
                                                          **kw)
    assert out.shape == q.shape[:2] + (v.shape[2],) and out.flags.c_contiguous
    assert lse.shape == (q.shape[1], q.shape[0])
    _criterion(out, ref_out, naive_out, dtype=dtype, name=f"out {name}", kind="out")
    _criterion(lse, ref_lse, naive_lse, dtype=dtype, name=f"lse {name}", kind="lse")
    refs = oracle_backward_varlen(dout, q, k, v, cu_q, cu_k, **kw)
    naive = cuflash.naive_attention_varlen_backward(dout, q, k, v, cu_q, cu_k, **kw)
    grads = {}
    for det in dets:
        g = cuflash.attention_varlen_backward(dout, res, tile=bwd_tile, deterministic=det)
        for x, gx, r, n, gname in zip((q, k, v), g, refs, naive, ("dq", "dk", "dv")):
            assert gx.shape == x.shape and gx.dtype == x.dtype and gx.flags.c_contiguous, gname
            _criterion(gx, r, n, dtype=dtype, name=f"{gname} {name} (det={det})", kind=gname,
                       floor_scale=grad_scale(*refs))
        grads[det] = g
    return out, lse, grads


def cu_seqlens(lengths, xp=np):
    """int32 (len + 1,) starts of sequences of these lengths, then the total, on xp."""
    return xp.asarray(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
