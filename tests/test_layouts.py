"""Strided layouts (issue 12): any view of q, k, v is accepted (a (B, T, H, d) array transposed to
(B, H, T, d), slices along T or d, negative strides, Fortran order, GQA on such views). Today
cuflash.checks.flatten copies such inputs to C-contiguous (batch, n, d) arrays; results equal
those of contiguous copies bit for bit, pass the oracle criterion, and come back as new
C-contiguous arrays: out (lead..., T, d_v), lse (lead..., T), dq, dk, dv shaped like q, k, v."""
import numpy as np
import pytest

import cuflash
from cuflash._xp import to_numpy

from helpers import poison_gpu_outputs  # noqa: F401 (autouse fixture)
from helpers import dtype_param, randn
from issue12_helpers import check_dense

B, T, S, H, D = 2, 29, 35, 4, 16


def _bthd(xp, dtype, n, heads, d, seed):
    """A (B, H, n, d) view of a (B, n, H, d) array: the layout of most frameworks' q, k, v."""
    return randn(xp, (B, n, heads, d), dtype, seed).transpose(0, 2, 1, 3)


def _views(xp, dtype):
    """name -> (q, k, v) views, none of them C-contiguous."""
    wide = randn(xp, (B, H, 2 * T, D + 8), dtype, 10)
    return {
        "bthd": (_bthd(xp, dtype, T, H, D, 1), _bthd(xp, dtype, S, H, D, 2),
                 _bthd(xp, dtype, S, H, D, 3)),
        "bthd_gqa": (_bthd(xp, dtype, T, H, D, 4), _bthd(xp, dtype, S, 2, D, 5),
                     _bthd(xp, dtype, S, 2, 8, 6)),
        "every_other_row": (wide[:, :, ::2, :D], randn(xp, (B, H, 2 * S, D), dtype, 7)[:, :, 1::2],
                            randn(xp, (B, H, S, 2 * D), dtype, 8)[..., D:]),
        "reversed": (randn(xp, (B, H, T, D), dtype, 11)[:, :, ::-1],
                     randn(xp, (B, H, S, D), dtype, 12)[..., ::-1],
                     randn(xp, (B, H, S, D), dtype, 13)[::-1]),
        "fortran": tuple(xp.asfortranarray(randn(xp, (B, H, n, D), dtype, 14 + i))
                         for i, n in enumerate((T, S, S))),
    }


NAMES = ["bthd", "bthd_gqa", "every_other_row", "reversed", "fortran"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [dtype_param("float16"), dtype_param("float32")])
def test_strided_views(xp, dtype, name):
    q, k, v = _views(xp, dtype)[name]
    assert not any(x.flags.c_contiguous for x in (q, k, v))
    dout = _bthd(xp, dtype, T, H, v.shape[-1], 20)                   # strided too
    out, lse, grads = check_dense(xp, q, k, v, dout, dtype=dtype, name=name, causal=True)
    assert out.shape == (B, H, T, v.shape[-1]) and lse.flags.c_contiguous
    # the same bits as contiguous copies of the same values
    qc, kc, vc, dc = (xp.ascontiguousarray(x) for x in (q, k, v, dout))
    out_c, res_c = cuflash.attention(qc, kc, vc, causal=True, return_residuals=True)
    np.testing.assert_array_equal(to_numpy(out), to_numpy(out_c))
    for g, gc in zip(grads[True], cuflash.attention_backward(dc, res_c)):
        np.testing.assert_array_equal(to_numpy(g), to_numpy(gc))


def test_outputs_do_not_alias_inputs(xp):
    """A view in, a new array out: writing to the output leaves the inputs as they were."""
    q, k, v = _views(xp, np.float32)["bthd"]
    before = to_numpy(q).copy()
    out = cuflash.attention(q, k, v)
    out[...] = 0
    np.testing.assert_array_equal(to_numpy(q), before)
    if xp is np:
        assert not np.shares_memory(out, q)
