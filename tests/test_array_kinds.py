"""NumPy inputs attention cannot take as they are: masked arrays (the mask would be ignored),
numpy.matrix (2-D only, ``*`` is a matrix product) and non-native byte order (garbage on the GPU).
Each is a TypeError naming the argument, from every entry point; plain arrays and memmaps work."""
from __future__ import annotations

import numpy as np
import pytest

import cuflash

pytestmark = pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")


def _qkv(shape=(1, 16, 16)):
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal(shape).astype(np.float32) for _ in range(3))


def _masked(a):
    return np.ma.array(a, mask=np.zeros(a.shape, bool))


BAD = [("masked", _masked, "numpy.ma.MaskedArray"),
       ("matrix", lambda a: np.matrix(a[0]), "numpy.matrix"),
       ("byteswapped", lambda a: a.astype(a.dtype.newbyteorder(">")), "byte order")]


@pytest.mark.parametrize("kind, make, text", BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_forward_rejects_naming_the_argument(kind, make, text, which):
    q, k, v = _qkv()
    args = {"q": q, "k": k, "v": v}
    args[which] = make(args[which])
    for fn in (cuflash.attention, cuflash.naive_attention):
        with pytest.raises(TypeError, match=rf"^{which} .*{text}"):
            fn(args["q"], args["k"], args["v"])


@pytest.mark.parametrize("kind, make, text", BAD[::2], ids=[BAD[0][0], BAD[2][0]])
@pytest.mark.parametrize("which", ["dout", "out", "lse"])
def test_backward_rejects_naming_the_argument(kind, make, text, which):
    q, k, v = _qkv()
    out, lse = cuflash.attention(q, k, v, return_lse=True)
    args = {"dout": np.ones_like(out), "out": out, "lse": lse}
    args[which] = make(args[which])
    with pytest.raises(TypeError, match=rf"^{which} .*{text}"):
        cuflash.attention_backward(args["dout"],
                                   cuflash.Residuals(q, k, v, args["out"], args["lse"]))


def test_memmap_and_plain_arrays_work(tmp_path):
    q, k, v = _qkv()
    mm = np.memmap(tmp_path / "q.bin", dtype=np.float32, mode="w+", shape=q.shape)
    mm[:] = q
    np.testing.assert_array_equal(cuflash.attention(mm, k, v), cuflash.attention(q, k, v))
