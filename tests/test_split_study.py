"""tools/split_study.py's model of float32 attention on split 16-bit tensor-core products (issue
15's 'highest' on wgmma, NOTES v44): the accumulator truncates toward zero, the scaled float16
split keeps 22 bits of every operand within float16's range, and the schemes order as the
H200's 3xTF32 figures did (accumulator chained >> per-k-step sums). CPU only."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import split_study as ss  # noqa: E402

from cuflash.oracle import normwise_error, oracle_attention  # noqa: E402


def test_rz32_truncates_toward_zero():
    x = np.array([1 + 2.0 ** -30, -(1 + 2.0 ** -30), 1 - 2.0 ** -30, 3.0, -2.0 ** -160])
    got = ss.rz32(x)
    want = np.array([1, -1, np.nextafter(np.float32(1), np.float32(0)), 3, -0.0], np.float32)
    np.testing.assert_array_equal(got, want)
    r = np.random.default_rng(0).standard_normal(1000) * 1e3
    t = ss.rz32(r).astype(np.float64)
    assert np.all(np.abs(t) <= np.abs(r)) and np.all(np.abs(r - t) < np.abs(r) * 2.0 ** -23)


def test_scaled_f16_split_keeps_22_bits_in_range():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((4, 256)) * np.exp2(rng.integers(-20, 20, (4, 1)))).astype(np.float32)
    s = ss.pow2_scale(x, -1)
    assert np.all(np.log2(s) == np.round(np.log2(s)))           # powers of two: exact unscaling
    xs = x * s
    assert np.abs(xs).max() < 2.0 ** 14 and np.abs(xs).max(-1).min() >= 2.0 ** 13
    hi, lo = ss.f16_split(xs)
    assert np.all(hi.astype(np.float16).astype(np.float32) == hi)
    assert np.all(lo.astype(np.float16).astype(np.float32) == lo)
    big = np.abs(xs) >= np.abs(xs).max(-1, keepdims=True) * 2.0 ** -16   # lo still normal there
    rel = np.abs(hi.astype(np.float64) + lo - xs)[big] / np.abs(xs)[big]
    assert rel.max() < 2.0 ** -21


@pytest.mark.parametrize("causal", [False, True])
def test_schemes_order(causal):
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 256, 64)).astype(np.float32) for _ in range(3))
    ref = oracle_attention(q, k, v, causal=causal)[0]
    naive = normwise_error(ss.naive(q, k, v, causal), ref)
    err = {f"{kind} {sums}": normwise_error(ss.attention(q, k, v, kind, sums, causal), ref)
           for kind, sums in ss.SCHEMES}
    assert 1e-8 < naive < 1e-6
    assert err["3xf16 rn"] < 1.5 * naive and err["3xf16 fresh"] < 2 * naive
    assert err["3xtf32 chain"] > 1.5 * err["3xtf32 fresh"]
    assert err["3xf16 chain"] > 1.5 * err["3xf16 fresh"]
    assert err["3xf16 fresh"] < err["3xtf32 fresh"]   # half the truncations (k16 against k8)
