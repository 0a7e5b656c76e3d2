"""tools/tf32_study.py's emulation of TF32 tensor-core products (issue 15's accuracy study): the
rounding is PTX's cvt.rna.tf32.f32 (10 mantissa bits, ties away from zero), the split is exact
to TF32's resolution twice over, and the schemes order as they must (tf32 ~1e-3, 3xtf32 at
float32's normwise error). CPU only."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import tf32_study as ts  # noqa: E402

from cuflash.oracle import normwise_error, oracle_attention  # noqa: E402


def test_tf32_rounds_to_ten_mantissa_bits_ties_away():
    one = np.float32(1.0)
    ulp = np.float32(2.0 ** -10)
    x = np.array([1 + 2.0 ** -11, 1 + 2.0 ** -12, 1 + 3 * 2.0 ** -11, -(1 + 2.0 ** -11),
                  1 + ulp], dtype=np.float32)
    want = np.array([1 + ulp, 1, 1 + 2 * ulp, -(1 + ulp), 1 + ulp], dtype=np.float32)
    np.testing.assert_array_equal(ts.tf32(x), want)
    assert ts.tf32(np.array([one]))[0] == one
    r = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    bits = ts.tf32(r).view(np.uint32)
    assert not np.any(bits & np.uint32(0x1FFF))


def test_split_carries_the_low_bits():
    x = np.random.default_rng(1).standard_normal(10000).astype(np.float32)
    big, small = ts.split(x)
    assert not np.any(big.view(np.uint32) & np.uint32(0x1FFF))
    rel = np.abs((big.astype(np.float64) + small) - x) / np.abs(x)
    assert rel.max() < 2.0 ** -21 and np.abs(small).max() <= np.abs(x).max() * 2.0 ** -10


@pytest.mark.parametrize("causal", [False, True])
def test_schemes_order(causal):
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((2, 96, 64)).astype(np.float32) for _ in range(3))
    ref = oracle_attention(q, k, v, causal=causal)[0]
    err = {s: normwise_error(ts.attention(q, k, v, s, causal), ref) for s in ts.SCHEMES}
    assert err["f32"] < 1e-6 and 1e-4 < err["tf32"] < 3e-3
    assert err["3xtf32"] < 2 * err["f32"] and err["4xtf32"] < 2 * err["f32"]
