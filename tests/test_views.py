"""What the CUDA kernels are handed (cuflash/gpu/views.py), checked on the CPU through the
kernel route (issue12_helpers.kernel_route: cuflash.gpu.ops with NumPy in CuPy's place and the
twin at the launches): the caller's arrays are read in place where the kernels can (strided
views, broadcasts, GQA's kv heads, packed batches) and copied where they cannot (misaligned,
negative strides), and the results equal the twin's own path."""
import numpy as np
import pytest

import cuflash
from cuflash.gpu import views
from issue12_helpers import kernel_route


def _r(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


SHAPES = [  # q, k, v: broadcasts, GQA, MQA, 5-D GQA, no head axis, zero sizes
    ((5, 16), (4, 7, 16), (4, 7, 16)),
    ((2, 4, 5, 16), (2, 4, 7, 16), (2, 4, 7, 16)),
    ((2, 8, 5, 16), (2, 2, 7, 16), (2, 2, 7, 16)),
    ((2, 8, 5, 16), (2, 1, 7, 16), (2, 1, 7, 16)),
    ((2, 4, 5, 16), (2, 1, 7, 16), (2, 4, 7, 16)),
    ((3, 2, 4, 5, 16), (3, 2, 1, 7, 16), (3, 2, 1, 7, 16)),
    ((1, 4, 5, 16), (3, 4, 7, 16), (3, 4, 7, 16)),
    ((0, 3, 5, 16), (1, 3, 7, 16), (1, 3, 7, 16)),
    ((2, 0, 5, 16), (2, 0, 7, 16), (2, 0, 7, 16)),
]


@pytest.mark.parametrize("qs,ks,vs", SHAPES, ids=[f"{q}-{k}" for q, k, _ in SHAPES])
def test_kernel_route_equals_the_twin(qs, ks, vs):
    """Forward and backward through the kernels' arrays give the twin's own results (the kernel
    route's dK/dV are summed per kv head; the twin's path repeats K/V per query head)."""
    rng = np.random.default_rng(sum(qs) + sum(ks))
    q, k, v = _r(rng, *qs), _r(rng, *ks), _r(rng, *vs)
    out, res = cuflash.attention(q, k, v, causal=True, return_residuals=True)
    dout = _r(rng, *out.shape)
    want = cuflash.attention_backward(dout, res)
    with kernel_route() as fake:
        out2, res2 = cuflash.attention(q, k, v, causal=True, return_residuals=True)
        got = cuflash.attention_backward(dout, res2)
    np.testing.assert_allclose(out2, out, rtol=1e-6, atol=1e-6)
    for g, w, x in zip(got, want, (q, k, v)):
        assert g.shape == x.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    assert [c[0] for c in fake.calls] == ["forward", "backward"]


def test_gqa_kv_heads_read_in_place():
    """Under GQA the kernels get k and v themselves: no K/V repeated per query head."""
    rng = np.random.default_rng(1)
    q, k, v = _r(rng, 2, 8, 5, 16), _r(rng, 2, 2, 7, 16), _r(rng, 2, 2, 7, 16)
    with kernel_route() as fake:
        cuflash.attention(q, k, v)
    r = fake.runs[0][0]
    assert r.group == 4 and r.k.shape == (2, 2, 7, 16)
    assert np.shares_memory(r.k, k) and np.shares_memory(r.v, v) and np.shares_memory(r.q, q)


def test_transposed_layout_read_in_place():
    """A (B, T, H, d) array transposed to (B, H, T, d) reaches the kernels as a view."""
    rng = np.random.default_rng(2)
    x = [_r(rng, 2, 9, 4, 16, dtype=np.float16) for _ in range(3)]
    q, k, v = (t.transpose(0, 2, 1, 3) for t in x)
    with kernel_route() as fake:
        out = cuflash.attention(q, k, v, causal=True)
    r = fake.runs[0][0]
    for handed, caller in ((r.q, q), (r.k, k), (r.v, v)):
        assert np.shares_memory(handed, caller)
        assert views.strides(handed)[2] == 4 * 16   # row stride H·d
    np.testing.assert_array_equal(out, cuflash.attention(*(np.ascontiguousarray(t) for t in
                                                           (q, k, v)), causal=True))


def test_misaligned_and_reversed_inputs_are_copied():
    """A start that is not 16-byte aligned, or a negative stride, is copied to a fresh buffer."""
    rng = np.random.default_rng(3)
    base = _r(rng, 2 * 33 * 16 + 1, dtype=np.float16)
    q = base[1:].reshape(2, 33, 16)
    assert not views.kernel_ok(q)
    x = views.bhnd(q, (), 2, 16, np)
    assert views.kernel_ok(x) and not np.shares_memory(x, q)
    np.testing.assert_array_equal(x[0], q)
    rev = _r(rng, 2, 33, 16)[:, ::-1]
    assert not views.kernel_ok(rev) and views.kernel_ok(views.bhnd(rev, (), 2, 16, np))


def test_packed_tokens_read_in_place():
    """attention_varlen's q, k, v reach the kernels in place, every sequence in one launch."""
    rng = np.random.default_rng(4)
    cu = np.array([0, 3, 3, 10, 17], dtype=np.int32)
    q, k, v = (_r(rng, 17, 4, 16) for _ in range(3))
    want = cuflash.attention_varlen(q, k, v, cu, cu, causal=True)
    with kernel_route() as fake:
        got = cuflash.attention_varlen(q, k, v, cu, cu, causal=True)
    r = fake.runs[0][0]
    assert r.packed and r.batch == 4 and r.T == 7
    assert np.shares_memory(r.q, q) and np.shares_memory(r.k, k)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
