"""The checkers themselves: the comparators in cuflash.oracle and the pass criterion
``helpers.assert_matches_oracle`` accept the CPU twin's answer and reject wrong answers made from
it, in every dtype: a 1% scaled output, a dropped key (the last key, S - 1), a D = rowsum(dO ∘ O)
off by 0.1%, and a wrong lse. If a comparator is broken (returns 0, is divided by 100) or a bound
is widened past these errors, a test here fails."""
import numpy as np
import pytest

from cuflash import twin
from cuflash.mask import Mask
from cuflash.oracle import (normwise_error, oracle_attention, oracle_backward, rel_error,
                            row_error, scale_bias)
import cuflash

from helpers import ALL_DTYPES, assert_matches_oracle, grad_scale, make_inputs, randn

# -- the comparators on known answers -------------------------------------------------------------


def test_rel_error_values():
    ref = np.array([[1.0, -2.0], [0.5, 4.0]])
    assert rel_error(ref, ref) == 0
    assert rel_error(ref * 1.01, ref) == pytest.approx(0.01)
    x = ref.copy()
    x[1, 1] += 0.04
    assert rel_error(x, ref) == pytest.approx(0.01)
    x[0, 0] = np.nan
    assert rel_error(x, ref) == np.inf
    assert rel_error(np.array([0.0, 3e-3]), np.zeros(2)) == pytest.approx(3e-3)  # absolute at 0
    # -inf entries of ref (lse of rows that see no key) are left out
    assert rel_error(np.array([-np.inf, 2.0]), np.array([-np.inf, 1.0])) == pytest.approx(1.0)


def test_normwise_and_bias_values():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((4, 50))
    assert normwise_error(ref * 1.01, ref) == pytest.approx(0.01)
    assert scale_bias(ref * 1.01, ref) == pytest.approx(0.01)
    assert scale_bias(ref * 0.99, ref) == pytest.approx(-0.01)
    noise = 1e-3 * rng.standard_normal(ref.shape)             # uncorrelated with ref
    assert normwise_error(ref + noise, ref) == pytest.approx(1e-3, rel=0.2)
    assert abs(scale_bias(ref + noise, ref)) < 2e-4
    assert normwise_error(ref + np.nan, ref) == np.inf and scale_bias(ref + np.inf, ref) == np.inf
    assert scale_bias(np.ones(3), np.zeros(3)) == 0 and normwise_error(np.ones(4), np.zeros(4)) == 2


def test_row_error_sees_a_small_wrong_row():
    ref = np.ones((5, 8))
    ref[3] *= 1e-3                                              # one small row
    x = ref.copy()
    x[3] = 0                                                    # ... lost entirely
    assert rel_error(x, ref) == pytest.approx(1e-3)            # the max norm barely sees it
    assert row_error(x, ref, tau=2.0 ** -8) > 0.2              # the row norm does
    assert row_error(ref * (1 + 1e-3), ref, tau=0) == pytest.approx(1e-3)
    assert row_error(np.zeros((2, 3)), np.zeros((2, 3)), tau=1e-3) == 0


def test_row_error_underflow_term():
    """float16 rows among the subnormals: rounding the exact answer is within the model
    (u · (||row|| + tiny · sqrt(n))), which the row norm alone says is many u; a row that lost
    half its value still fails (45 u here, the bound is 4 u)."""
    u, tiny = 2.0 ** -11, 2.0 ** -14
    rng = np.random.default_rng(7)
    ref = rng.standard_normal((64, 64)) * np.logspace(-2, -5.5, 64)[:, None]
    rounded = ref.astype(np.float16)
    assert row_error(rounded, ref, tau=u) > 4 * u                  # subnormal rows, no term
    assert row_error(rounded, ref, tau=u, tiny=tiny) <= u           # the model's bound
    halved = rounded.copy()
    halved[-1] /= 2                                                 # the smallest row, half lost
    assert row_error(halved, ref, tau=u, tiny=tiny) > 20 * u        # the bound is 4 u


# -- the criterion against wrong answers ----------------------------------------------------------

class DropLastKey:
    """The mask rule with key S - 1 hidden from every query: a kernel that drops the last key."""

    def __init__(self, mask):
        self.mask = mask

    def __getattr__(self, name):
        return getattr(self.mask, name)

    def visible(self, i, j, T, S):
        return self.mask.visible(i, j, T, S) & (j != S - 1)

    def tile_needs_mask(self, i0, i1, j0, j1, T, S):
        return True


class ScaledD(twin.ByteCounter):
    """A byte counter that stores D = rowsum(dO ∘ O) off by a factor (the twin stores D through
    its counter): a backward whose D term is wrong by 0.1%."""

    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def store(self, name, dst, index, value):
        super().store(name, dst, index, value * self.factor if name == "D" else value)


def _rejects(fn):
    """True if fn() raises the criterion's AssertionError."""
    try:
        fn()
    except AssertionError:
        return True
    return False


# (T, S, d, causal): T > S causal has rows that see one key (dS = 0: where a wrong D shows in
# every dtype), T < S full has every row see every key, T = S causal has both kinds of rows.
CASES = [(97, 57, 64, True), (61, 150, 32, False), (128, 128, 64, True)]


def _problem(dtype, T, S, d, causal, seed):
    q, k, v = make_inputs(np, (2, T, d), (2, S, d), dtype, seed)
    dout = randn(np, (2, T, d), dtype, seed + 1)
    mask, scale = Mask.make(causal=causal), d ** -0.5
    out, lse = twin.forward(q, k, v, mask=mask, scale=scale, block_m=64, block_n=64)
    ref_out, ref_lse = oracle_attention(q, k, v, causal=causal)
    naive_out, naive_lse = cuflash.naive_attention(q, k, v, causal=causal, return_lse=True)
    refs = oracle_backward(dout, q, k, v, causal=causal)
    naive = cuflash.naive_attention_backward(dout, q, k, v, causal=causal)

    def fwd(o, l):
        assert_matches_oracle(o, ref_out, naive_out, dtype=dtype, name="out")
        assert_matches_oracle(l, ref_lse, naive_lse, dtype=dtype, name="lse")

    def bwd(grads):
        for name, g, r, n in zip(("dq", "dk", "dv"), grads, refs, naive):
            assert_matches_oracle(g, r, n, dtype=dtype, name=name, floor_scale=grad_scale(*refs))

    def backward(o=out, l=lse, m=mask, counter=None):
        return twin.backward(dout, q, k, v, o, l, mask=m, scale=scale, block_m=64, block_n=64,
                             counter=counter)

    return dict(q=q, k=k, v=v, mask=mask, scale=scale, out=out, lse=lse, fwd=fwd, bwd=bwd,
                backward=backward)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "T{}_S{}_d{}_{}".format(
    *c[:3], "causal" if c[3] else "full"))
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_criterion_accepts_the_twin_and_rejects_wrong_answers(dtype, case, seed):
    T, S, d, causal = case
    p = _problem(dtype, T, S, d, causal, seed)
    out, lse = p["out"], p["lse"]
    p["fwd"](out, lse)                                # the right answer passes ...
    p["bwd"](p["backward"]())
    # ... a 1% scaled output does not
    scaled = (out.astype(np.float64) * 1.01).astype(dtype)
    assert _rejects(lambda: p["fwd"](scaled, lse)), "1% scaled output accepted"
    # ... nor a forward or a backward without the last key
    drop = DropLastKey(p["mask"])
    o2, l2 = twin.forward(p["q"], p["k"], p["v"], mask=drop, scale=p["scale"], block_m=64,
                          block_n=64)
    assert _rejects(lambda: p["fwd"](o2, l2)), "forward without key S-1 accepted"
    assert _rejects(lambda: p["bwd"](p["backward"](m=drop))), "backward without key S-1 accepted"
    # ... nor a wrong lse, in the forward's output or fed to the backward
    wrong = lse + np.log(1.02).astype(lse.dtype)
    assert _rejects(lambda: p["fwd"](out, wrong)), "lse off by log(1.02) accepted"
    assert _rejects(lambda: p["bwd"](p["backward"](l=wrong))), "backward from a wrong lse accepted"
    # ... nor D off by 0.1%, where a row sees exactly one key (its dq is then exactly 0); with
    # every row seeing many keys that error is below bfloat16's rounding (see helpers.ROUNDOFF)
    if (causal and S <= T) or np.dtype(dtype).itemsize >= 4:
        assert _rejects(lambda: p["bwd"](p["backward"](counter=ScaledD(1.001)))), \
            "D off by 0.1% accepted"


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_criterion_rejects_small_scale_errors_in_wide_dtypes(dtype):
    """Where rounding allows, much smaller errors fail too: 1e-3 in float16, 1e-5 in float32."""
    factor = {"float16": 1e-3, "float32": 1e-5, "float64": 1e-11}.get(np.dtype(dtype).name)
    if factor is None:
        pytest.skip("bfloat16: 1% is the smallest scale error its rounding leaves visible")
    p = _problem(dtype, 97, 57, 64, True, 3)
    scaled = (p["out"].astype(np.float64) * (1 + factor)).astype(dtype)
    assert _rejects(lambda: p["fwd"](scaled, p["lse"]))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_criterion_rejects_lse_off_by_2e_5(dtype):
    """An lse 2e-5 too large (relative): about what losing one key of weight 1e-4 does, e.g. key
    S - 1 at S ~ 1000, where out changes by less than 16-bit rounding. lse is computed in float32
    for 16-bit inputs, so its bound (helpers.LSE_16) is float32-level and this fails."""
    p = _problem(dtype, 97, 57, 64, True, 5)
    lse = p["lse"]
    wrong = np.where(np.isfinite(lse), lse + 2e-5 * np.abs(lse[np.isfinite(lse)]).max(), lse)
    assert _rejects(lambda: p["fwd"](p["out"], wrong.astype(lse.dtype)))
