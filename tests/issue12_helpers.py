"""Helpers of the issue-12 tests (GQA, varlen, head dims, layouts).

The CUDA path's glue on the CPU: ``kernel_route`` sends NumPy arrays down the GPU route
(``cuflash.gpu.ops`` itself, with NumPy in CuPy's place) up to the kernel launches, which a
stand-in replaces: it checks what the kernels would be handed (``views.kernel_ok`` arrays:
(batch, heads, n, D) or packed (total, heads, D), one head dim D of KERNEL_HEAD_DIMS, K/V with
the kv heads only, a kernel spec that plan.validate accepts on sm_90) and then runs the CPU twin
on them. So the views, copies, pads and slices of the GPU path are tested here, without a GPU;
the kernels themselves are tested on the GPU (the xp fixture's CuPy cases)."""
import contextlib

import numpy as np

from cuflash import api, twin
from cuflash._xp import dtype_name
from cuflash.checks import KERNEL_HEAD_DIMS
from cuflash.gpu import ops, plan, views

ARCH = "sm_90"


class FakeKernels:
    """ops._forward / ops._backward run by the twin; records (pass, head dim) per launch set."""

    def __init__(self):
        self.calls = []
        self.runs = []     # the ops._Run of each launch set: what the kernels were handed

    def _handed(self, r, p, tile, backward, deterministic, D, *arrays):
        for a in (r.q, r.k, r.v) + arrays:
            assert isinstance(a, np.ndarray) and views.kernel_ok(a), (a.shape, a.strides)
            assert a.shape[-1] == D and a.ndim == (3 if r.packed else 4), a.shape
        assert D in KERNEL_HEAD_DIMS, D
        assert r.k.shape[1] * r.group == r.heads, (r.k.shape, r.group)
        for spec in ops._specs(dtype_name(r.q.dtype), D, tile, r.variant(p), backward,
                               deterministic):
            plan.validate(spec, plan.SMEM_LIMIT[ARCH], ARCH)
            assert spec.variant.packed == r.packed, spec.name   # lengths from cu_seqlens
            assert ("_varlen" in spec.name) == r.packed, spec.name
            assert spec.variant.same_lens == r.same_lens, spec.name  # one array for both
        self.calls.append(("backward" if backward else "forward", D))
        self.runs.append((r,) + arrays)

    def forward(self, r, p, tile, D, num_splits=1, before_launch=None):
        # ops._forward: before_launch once the launch is prepared (from r), before the launch
        self.resolved_before_launch = getattr(getattr(p, "lens", None), "_host", 0) is not None
        if before_launch is not None:
            before_launch()
        self._handed(r, p, tile, False, True, D)
        out, lse = r.q_like(), np.empty(r.rows()[0], dtype=np.float64 if r.q.dtype == np.float64
                                        else np.float32)
        for qs, ks, slopes in _sequences(r, p):
            q3, k3, v3 = (_flat(x, rep) for x, rep in ((r.q[qs], 1), (r.k[ks], r.group),
                                                       (r.v[ks], r.group)))
            o3, l3 = twin.forward(q3, k3, v3, mask=p.mask, scale=p.scale, block_m=tile.block_m,
                                  block_n=tile.block_n, softcap=p.softcap, slopes=slopes,
                                  mask_mod=getattr(p, "mask_mod", None), heads=r.heads,
                                  num_splits=num_splits or 1)
            out[qs] = _unflat(o3, r.q[qs].shape)
            _lse_view(lse, r, qs)[...] = l3.reshape(_lse_view(lse, r, qs).shape)
        return out, lse

    def backward(self, r, dout, out, lse, p, tile, D, deterministic):
        self._handed(r, p, tile, True, deterministic, D, dout, out)
        dq, dk, dv = r.q_like(), r.k_like(), r.k_like()
        lse = np.ascontiguousarray(lse).reshape(r.rows()[0])
        for qs, ks, slopes in _sequences(r, p):
            q3, do3, o3 = (_flat(x[qs], 1) for x in (r.q, dout, out))
            k3, v3 = (_flat(x[ks], r.group) for x in (r.k, r.v))
            l3 = np.ascontiguousarray(_lse_view(lse, r, qs)).reshape(q3.shape[:2])
            g = twin.backward(do3, q3, k3, v3, o3, l3, mask=p.mask, scale=p.scale,
                              block_m=tile.block_m, block_n=tile.block_n,
                              deterministic=deterministic, softcap=p.softcap, slopes=slopes,
                              mask_mod=getattr(p, "mask_mod", None), heads=r.heads)
            dq[qs] = _unflat(g[0], r.q[qs].shape)
            for dst, gk in ((dk, g[1]), (dv, g[2])):
                dst[ks] = _group_sum(gk, r.k[ks].shape, r.group, r.packed)
        return dq, dk, dv


def _sequences(r, p):
    """(q index, k index, ALiBi slopes) per packed sequence, or one entry for the whole batch;
    an index selects (batch, heads, n, D) rows of r.q / r.k, or (n, heads, D) packed rows."""
    slopes = None if p.alibi_slopes is None else np.asarray(p.alibi_slopes).reshape(-1)
    if not r.packed:
        return [(slice(None), slice(None), slopes)]
    cq, ck = np.asarray(r.cu_q), np.asarray(r.cu_k)
    return [(slice(int(cq[b]), int(cq[b + 1])), slice(int(ck[b]), int(ck[b + 1])),
             None if slopes is None else slopes[b * r.heads:(b + 1) * r.heads])
            for b in range(r.batch)]


def _flat(x, rep):
    """(batch, heads, n, D) -> (batch·heads·rep, n, D); packed (n, heads, D) -> (heads·rep, n, D)."""
    if x.ndim == 3:
        x = x.transpose(1, 0, 2)[None]
    x = np.repeat(x, rep, axis=1) if rep > 1 else x
    return np.ascontiguousarray(x).reshape((x.shape[0] * x.shape[1],) + x.shape[2:])


def _unflat(x3, shape):
    """The inverse of _flat (rep = 1) into `shape`."""
    if len(shape) == 3:
        return x3.reshape(shape[1], shape[0], shape[2]).transpose(1, 0, 2)
    return x3.reshape(shape)


def _group_sum(g3, shape, group, packed):
    """(…·heads, n, D) gradients of the repeated K/V summed over each group, into `shape`."""
    if g3.size == 0 or 0 in shape:
        return np.zeros(shape, g3.dtype)
    n, D = g3.shape[-2:]
    wide = g3.astype(np.float64 if g3.dtype == np.float64 else np.float32)
    summed = wide.reshape(g3.shape[0] // (shape[1] * group), shape[1], group, n, D).sum(axis=2).astype(g3.dtype)
    if packed:
        return summed[0].transpose(1, 0, 2)
    return summed.reshape(shape)


def _lse_view(lse, r, qs):
    """The rows of lse (batch, heads, T) or packed (heads, total_q) of one entry of _sequences."""
    return lse[:, qs] if r.packed else lse


@contextlib.contextmanager
def kernel_route():
    """Within this block NumPy arrays take the GPU route (cuflash.gpu.ops with NumPy in CuPy's
    place) to a FakeKernels (yielded) at the launches."""
    fake = FakeKernels()
    saved = api._backend, ops._cp, ops._forward, ops._backward, ops.smem_limit, ops.device_arch
    api._backend = lambda xp: ops
    ops._cp = lambda: np
    ops._forward, ops._backward = fake.forward, fake.backward
    ops.smem_limit = lambda device_id=None: plan.SMEM_LIMIT[ARCH]
    ops.device_arch = lambda device_id=None: ARCH
    try:
        yield fake
    finally:
        (api._backend, ops._cp, ops._forward, ops._backward, ops.smem_limit,
         ops.device_arch) = saved


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


def criterion(got, ref, naive, *, dtype, name, kind, floor_scale=None):
    """assert_matches_oracle on host copies of got, ref and naive, short rows joined (SHORT_ROW)."""
    from helpers import assert_matches_oracle
    from cuflash._xp import to_numpy

    got, ref, naive = (_rows(to_numpy(x), kind) for x in (got, ref, naive))
    assert_matches_oracle(got, ref, naive, dtype=dtype, name=name, kind=kind,
                          floor_scale=floor_scale)

def _check_grads(backward, inputs, refs, naive, dets, *, dtype, name) -> dict:
    """backward(det) -> (dq, dk, dv) for each dQ mode in dets: shaped, typed and laid out like
    the inputs, each against the oracle's gradients `refs` (naive's as the yardstick).
    Returns {det: grads}."""
    from helpers import grad_scale
    grads = {}
    for det in dets:
        g = backward(det)
        for x, gx, r, n, gname in zip(inputs, g, refs, naive, ("dq", "dk", "dv")):
            assert gx.shape == x.shape and gx.dtype == x.dtype and gx.flags.c_contiguous, gname
            criterion(gx, r, n, dtype=dtype, name=f"{gname} {name} (det={det})", kind=gname,
                       floor_scale=grad_scale(*refs))
        grads[det] = g
    return grads


def check_dense(xp, q, k, v, dout, *, dtype, name, fwd_tile=None, bwd_tile=None,
                dets=(True,), **kw):
    """attention and attention_backward (each dQ mode in ``dets``) against the float64 oracle
    (assert_matches_oracle, naive in the same precision as the yardstick). Returns
    (out, lse, {det: grads})."""
    import cuflash
    from cuflash.oracle import oracle_attention, oracle_backward

    ref_out, ref_lse = oracle_attention(q, k, v, **kw)
    out, lse, res = cuflash.attention(q, k, v, tile=fwd_tile, return_lse=True,
                                      return_residuals=True, **kw)
    naive_out, naive_lse = cuflash.naive_attention(q, k, v, return_lse=True, **kw)
    assert out.flags.c_contiguous
    criterion(out, ref_out, naive_out, dtype=dtype, name=f"out {name}", kind="out")
    criterion(lse, ref_lse, naive_lse, dtype=dtype, name=f"lse {name}", kind="lse")
    refs = oracle_backward(dout, q, k, v, **kw)
    naive = cuflash.naive_attention_backward(dout, q, k, v, **kw)
    grads = _check_grads(lambda det: cuflash.attention_backward(dout, res, tile=bwd_tile,
                                                                deterministic=det),
                         (q, k, v), refs, naive, dets, dtype=dtype, name=name)
    return out, lse, grads


def check_varlen(xp, q, k, v, cu_q, cu_k, dout, *, dtype, name, tile=None, bwd_tile=None,
                 dets=(True,), **kw):
    """attention_varlen and attention_varlen_backward against the float64 oracle, as
    check_dense. Returns (out, lse, {det: grads})."""
    import cuflash
    from cuflash.oracle import oracle_attention_varlen, oracle_backward_varlen

    ref_out, ref_lse = oracle_attention_varlen(q, k, v, cu_q, cu_k, **kw)
    out, lse, res = cuflash.attention_varlen(q, k, v, cu_q, cu_k, tile=tile, return_lse=True,
                                             return_residuals=True, **kw)
    naive_out, naive_lse = cuflash.naive_attention_varlen(q, k, v, cu_q, cu_k, return_lse=True,
                                                          **kw)
    assert out.shape == q.shape[:2] + (v.shape[2],) and out.flags.c_contiguous
    assert lse.shape == (q.shape[1], q.shape[0])
    criterion(out, ref_out, naive_out, dtype=dtype, name=f"out {name}", kind="out")
    criterion(lse, ref_lse, naive_lse, dtype=dtype, name=f"lse {name}", kind="lse")
    refs = oracle_backward_varlen(dout, q, k, v, cu_q, cu_k, **kw)
    naive = cuflash.naive_attention_varlen_backward(dout, q, k, v, cu_q, cu_k, **kw)
    grads = _check_grads(lambda det: cuflash.attention_varlen_backward(dout, res, tile=bwd_tile,
                                                                       deterministic=det),
                         (q, k, v), refs, naive, dets, dtype=dtype, name=name)
    return out, lse, grads


def cu_seqlens(lengths, xp=np):
    """int32 (len + 1,) starts of sequences of these lengths, then the total, on xp."""
    return xp.asarray(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
