"""Test helpers: seeded inputs on either array module, and the oracle pass criterion
(``assert_matches_oracle``): err(got) <= 2 · err(naive in the same precision) + floor(dtype), and,
independently of naive, roundoff bounds in units of the dtype's unit roundoff (see ROUNDOFF)."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from cuflash._xp import bfloat16, dtype_name, to_numpy
from cuflash.oracle import normwise_error, rel_error, row_error, scale_bias

#: Absolute slack added to 2 · err(naive), per dtype (a few units in the last place relative to
#: the largest output entry): it only matters where the naive error happens to be ~0, e.g. the
#: float64 naive path, which *is* the oracle. float32: the CUDA-core kernels summed P·V over the
#: keys one after another, so long rows collected more rounding than cuBLAS's blocked sums:
#: 1.48e-6 at S = 1000, d = 16 on the H200 (2026-12-01), hence 2e-6. Since NOTES v25 they sum
#: each tile from zero, but the floor still carries other cases: at 2.5e-7 (call 91), 20 of 722
#: float32 GPU tests failed, the error above 2x naive's up to 8.8e-7 of the scale (dq where
#: naive's is exactly 0, split-KV and paged decode rows, d = 1, tiny TF32 problems), so it stays.
FLOORS = {"float64": 1e-12, "float32": 2e-6, "float16": 1e-3, "bfloat16": 8e-3}

_NO_BF16 = pytest.mark.skipif(bfloat16 is None, reason="ml_dtypes not installed (no bfloat16)")

#: dtype parameters with short ids; bfloat16 is skipped without ml_dtypes.
DTYPES = {"float16": np.dtype(np.float16), "bfloat16": bfloat16,
          "float32": np.dtype(np.float32), "float64": np.dtype(np.float64)}
SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64"}


def dtype_param(name):
    """A pytest.param for the dtype called `name` (e.g. 'bfloat16'), id like 'bf16'."""
    marks = [_NO_BF16] if name == "bfloat16" else []
    return pytest.param(DTYPES[name], id=SHORT[name], marks=marks)


def dtype_case(name, *values, id):
    """A pytest.param of (dtype, *values) with id SHORT[name] + '-' + id (skipped like
    dtype_param)."""
    marks = [_NO_BF16] if name == "bfloat16" else []
    return pytest.param(DTYPES[name], *values, id=f"{SHORT[name]}-{id}", marks=marks)


ALL_DTYPES = [dtype_param(n) for n in ("float16", "bfloat16", "float32", "float64")]


def case_seed(*parts) -> int:
    """A seed that differs per test case (per tile, pass and shape), the same on every run:
    a kernel that skips part of its work then cannot pass on values another case left behind."""
    return zlib.crc32(repr(parts).encode()) % 2**31


@pytest.fixture(autouse=True)
def poison_gpu_outputs(request):
    """Every output buffer of a kernel is filled with NaN before the launch (cuflash.gpu.ops.
    poisoned_outputs) in tests that run on CuPy: a test module imports this fixture to make it
    apply to all its tests (on NumPy it does nothing)."""
    gpu = "cp" in request.fixturenames or (
        "xp" in request.fixturenames and request.getfixturevalue("xp") is not np)
    if not gpu:
        yield
        return
    from cuflash.gpu.ops import poisoned_outputs
    with poisoned_outputs():
        yield


def randn(xp, shape, dtype, seed):
    """Standard-normal array of `shape`, rounded to `dtype`, made with NumPy and moved to `xp`."""
    a = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return xp.asarray(a)


def make_inputs(xp, shape_q, shape_k, dtype, seed):
    """q (shape_q), k and v (shape_k): fresh standard-normal inputs of `dtype` on `xp`."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(shape_q).astype(dtype)
    k = rng.standard_normal(shape_k).astype(dtype)
    v = rng.standard_normal(shape_k).astype(dtype)
    return xp.asarray(q), xp.asarray(k), xp.asarray(v)


#: The score variants the float32 kernel families' tests run, as a pytest parametrize of `opts`
#: ("alibi": slopes that gqa_strided_inputs makes)
score_variants = pytest.mark.parametrize(
    "opts", [dict(window=(40, 7)), dict(softcap=5.0), dict(causal=True, window=(30, None)),
             dict(alibi="slopes"), dict(causal=True, softcap=3.0, alibi="slopes")],
    ids=["window", "softcap", "causal-window", "alibi", "causal-softcap-alibi"])


def gqa_strided_inputs(xp, d, dtype, tag, opts):
    """(q, k, v, opts) of a GQA case: q (2, 8, 150, d), k and v (2, 2, 203, d) strided views of
    one (2, 2, 203, 2·d) array (2 kv heads for 8 query heads), seeds from `tag` and `opts`; in
    the opts returned, "alibi" becomes 8 slopes on `xp`."""
    q, _, _ = make_inputs(xp, (2, 8, 150, d), (2, 8, 1, d), dtype,
                          seed=case_seed(tag + "v", sorted(opts), d))
    _, kv, _ = make_inputs(xp, (2, 2, 1, d), (2, 2, 203, 2 * d), dtype,
                           seed=case_seed(tag + "kv", sorted(opts), d))
    opts = dict(opts)
    if opts.pop("alibi", None):
        opts["alibi_slopes"] = xp.asarray(np.linspace(0.05, 0.5, 8), dtype=np.float32)
    return q, kv[..., :d], kv[..., d:], opts


def grad_scale(*refs):
    """Largest |entry| over a set of oracle gradients (dq, dk, dv): the ``floor_scale`` of each."""
    return max(float(np.abs(np.asarray(r, dtype=np.float64)).max(initial=0.0)) for r in refs)


#: Unit roundoff u of each dtype: half the gap between 1 and the next representable number.
UNIT_ROUNDOFF = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -24,
                 "float64": 2.0 ** -53}
#: The dtype sums run in (lse, and the float accumulators) for each input dtype.
ACCUM = {"float16": "float32", "bfloat16": "float32", "float32": "float32", "float64": "float64"}

#: Roundoff bounds, independent of naive, for 16-bit out, dq, dk, dv, in units of the dtype's u
#: (each measure is in cuflash.oracle; "max" is relative to max(|oracle|, floor_scale)).
#:
#: Calibration (``python tools/calibrate_bounds.py``, the CPU twin at 64×64 tiles, 9 shapes of
#: test_forward/test_backward and (97, 257, 64), (257, 97, 128), causal and not, 4 seeds, float16
#: and bfloat16): the twin's largest value of each measure over every case, and the smallest value
#: each mutant reaches, in units of u, are printed by that script; at the commit that set these
#: bounds: max 1.64 (f16 dq), normwise 0.81, |bias| 0.35, row (out, dv) 1.65 (f16 dv). So each
#: bound is 2.4-3× the twin's worst case. The GPU kernels differ from the twin by float32
#: summation order and ex2.approx (relative errors ~1e-7), which is 1e-4 of a 16-bit u: their
#: error is the same 16-bit rounding of P, dS and the outputs, so the same margin holds for them.
#: The bounds cannot be wider: a 1% scaled output is 2.56 u in bfloat16, and "bias" is what
#: separates it from rounding (the twin's |bias| <= 0.35 u; a 1% scale gives >= 2.2 u).
ROUNDOFF = {"max": 4.0, "normwise": 2.0, "bias": 1.0, "row": 4.0}
#: Outputs whose rows are P-weighted sums of input rows without the D = rowsum(dO ∘ O)
#: cancellation: each row's error is rounding of that row (the twin: <= 1.65 u), so a row that
#: lost one key shows even when it is the smallest row (a dropped key S-1 costs dv row S-1 its
#: whole value: >= 50 u in bfloat16).
ROW_KINDS = ("out", "dv")
#: Smallest normal number of each 16-bit dtype: the row measure's underflow term
#: (cuflash.oracle.row_error). It matters for float16 alone: dv rows of the last keys of a causal
#: problem with many keys (P ~ 1/S) lie among float16's subnormals, where rounding the exact
#: dv to float16 is already 3.8 u by row (tests/test_long_keys.py, S = 20011; call 88's
#: wgmma_ws case failed the bound of 4 u at 7.4 u with a max error of 0.41 u).
SMALLEST_NORMAL = {"float16": 2.0 ** -14, "bfloat16": 2.0 ** -126}
#: lse of 16-bit inputs is computed in float32 from exact products: bound 32 u(float32)
#: = 1.9e-6 relative to max |lse| (the twin: <= 2.2 u(float32); a dropped key S-1 moved lse by
#: >= 7e-5 in the calibration, a wrong lse log(1.02) by 2e-3).
LSE_16 = 32.0
#: Rows where the oracle is exactly 0 (queries that see one key: P = 1, dP = D, so dq = 0; rows
#: that see none): |got| <= ZERO_ROWS · u(accumulator) · floor scale (the twin: <= 10 u(float32)
#: = 5.8e-7 of the largest gradient; a D = rowsum(dO ∘ O) off by 0.1% puts 2.7e-4 there).
ZERO_ROWS = 1024.0
#: Gradients of the tiled backward, which reads P = exp(s - lse) from lse stored in the
#: accumulator's precision: lse's rounding (|lse|·u) and the kernels' conversion to log2 units
#: (lse·log2 e, rounded again) put up to LSE_GRAD·|lse|·u(acc) of relative error into every P of
#: a row; naive recomputes the softmax and pays none of it. It matters where scores are large:
#: softcap 30 with scale 4 (|lse| ~ 30) in float32 gives dq 2.5e-6 when the kernels' arithmetic
#: is emulated exactly (`.ab/softcap30_dq_emu.py`, seed 0) and 3.8e-6 on the H200 (simt), against
#: naive's 0.8-1.3e-6 (NOTES v17); with P from m and l kept apart it would be 1.9e-6, but the
#: backward's input is lse alone.
LSE_GRAD = 2.0
#: assert_matches_oracle's allowance in units of a coarser product roundoff (product_unit): the
#: TF32 backward's rows of one visible key measured 0.4-0.7 such units on the H200 (v33, call 137)
PRODUCT_UNITS = 8.0

KINDS = ("out", "lse", "dq", "dk", "dv")


def _kind(name, kind):
    if kind is None:
        kind = name.split()[0] if name.split() else ""
    assert kind in KINDS, f"assert_matches_oracle: kind {kind!r} (from name {name!r}) not in {KINDS}"
    return kind


def assert_matches_oracle(got, oracle_ref, naive_got, *, dtype, name, floor_scale=None, kind=None,
                          lse_scale=None, product_unit=None):
    """The pass criterion of every path against the float64 oracle. ``kind`` (default: the first
    word of ``name``) is 'out', 'lse', 'dq', 'dk' or 'dv'.

    1. got has the oracle's shape, and -inf (lse of rows that see no key) sits exactly where the
       oracle has it.
    2. err <= 2 · err(naive_got) + floor, err = ``cuflash.oracle.rel_error`` (max abs error /
       max |oracle|), the floor FLOORS[dtype] relative to ``floor_scale`` (default max |oracle|),
       plus, for gradients given ``lse_scale`` (max |lse| of the oracle), LSE_GRAD · lse_scale
       units of the accumulator's roundoff.
    3. Rows where the oracle is exactly 0 are 0 to ZERO_ROWS units of the accumulator's roundoff
       relative to max(|oracle|, floor_scale).
    4. 16-bit dtypes, independently of naive (whose own error is checked in test_naive.py):
       lse: rel_error <= LSE_16 · u(float32); out, dq, dk, dv: max error relative to
       max(|oracle|, floor_scale) <= ROUNDOFF["max"] · u, and, unless the tensor is below 1/64 of
       the floor scale (then only the max check applies), normwise error, |scale_bias| and, for
       ROW_KINDS, row_error (tau = u) within ROUNDOFF.

    ``product_unit``: the unit roundoff of the products' operands where it is coarser than the
    accumulator's (2^-11 for float32's precision='tf32'); the floor and the zero-row bound then
    allow PRODUCT_UNITS of it: a query that sees one key has dS = P ∘ (dP - D) = 0 exactly, but
    the kernels' D = rowsum(dO ∘ O) comes from O while dP is a TF32 product, so dS there is
    TF32 rounding, where naive (D from its own dP) gets 0.

    Gradients pass ``floor_scale=grad_scale(dq, dk, dv)``: dq and dk are sums of
    dS = P ∘ (dP - D), and a query row that sees exactly one key has dS = 0 exactly in the naive
    path (P = 1, so its D *is* dP) but rounding-level noise in the tiled path, whose
    D = rowsum(dO ∘ O) comes from the stored, rounded O (as in FlashAttention-2). Where such rows
    dominate dk or dq (S = 1, or causal with S = 2 where the last row's softmax is peaked), dk and
    dq are tiny or exactly 0 and the naive error is no yardstick; the noise is a few units in the
    last place of the *largest* gradient, so the floor is taken relative to that.
    """
    dname = dtype_name(dtype)
    kind = _kind(name, kind)
    got_np = to_numpy(got)
    ref = np.asarray(oracle_ref, dtype=np.float64)
    where = f"{name} ({dname}, shape {tuple(ref.shape)})"
    assert tuple(got_np.shape) == tuple(ref.shape), \
        f"{name} ({dname}): shape {tuple(got_np.shape)}, oracle {tuple(ref.shape)}"
    got64 = got_np.astype(np.float64)
    bad_inf = np.isneginf(got64) != np.isneginf(ref)
    assert not bad_inf.any(), (f"{where}: -inf at "
                               f"{np.argwhere(bad_inf)[:5].tolist()} differs from the oracle")
    fin = np.isfinite(ref)
    m = float(np.abs(ref[fin]).max(initial=0.0))
    denom = m if m > 0 else 1.0                  # rel_error is absolute when the oracle is all 0
    scale = m if floor_scale is None else max(floor_scale, m)
    err = rel_error(got_np, ref)
    err_naive = rel_error(naive_got, ref)
    floor = FLOORS[dname] * (denom if floor_scale is None else scale) / denom
    u_acc = UNIT_ROUNDOFF[ACCUM[dname]]
    if lse_scale is not None and kind in ("dq", "dk", "dv"):
        floor += LSE_GRAD * lse_scale * u_acc
    zero_bound = ZERO_ROWS * u_acc
    if product_unit is not None:
        floor += PRODUCT_UNITS * product_unit * (denom if floor_scale is None else scale) / denom
        zero_bound = max(zero_bound, PRODUCT_UNITS * product_unit)
    bound = 2 * err_naive + floor
    assert err <= bound, (f"{where}: rel. error {err:.3e} > 2 × naive error {err_naive:.3e} + "
                          f"floor {floor:.3e} = {bound:.3e} (max |oracle| {m:.3e})")
    # 3. rows the oracle has exactly 0
    if ref.ndim >= 1 and ref.size and kind != "lse":
        zero = (ref == 0).all(axis=-1)
        if zero.any():
            worst = float(np.abs(got64[zero]).max()) / (scale if scale > 0 else 1.0)
            assert worst <= zero_bound, (
                f"{where}: rows where the oracle is exactly 0 have |entries| up to {worst:.3e} of "
                f"max(|oracle|, floor scale), > {ZERO_ROWS:g} u({ACCUM[dname]}) = "
                f"{ZERO_ROWS * u_acc:.3e} (or {PRODUCT_UNITS:g} product units) (first such rows "
                f"{np.argwhere(zero)[:3].tolist()})")
    if dname not in ("float16", "bfloat16"):
        return
    # 4. 16-bit: roundoff bounds that do not depend on naive
    if kind == "lse":
        assert err <= LSE_16 * u_acc, (f"{where}: rel. error {err:.3e} > {LSE_16:g} u(float32) "
                                       f"= {LSE_16 * u_acc:.3e} (lse is computed in float32)")
        return
    u = UNIT_ROUNDOFF[dname]
    abs_err = float(np.abs(got64[fin] - ref[fin]).max(initial=0.0)) / (scale if scale > 0 else 1.0)
    assert abs_err <= ROUNDOFF["max"] * u, (
        f"{where}: max error {abs_err:.3e} of max(|oracle|, floor scale) > "
        f"{ROUNDOFF['max']:g} u = {ROUNDOFF['max'] * u:.3e}")
    if m < scale / 64:
        return
    measures = {"normwise": normwise_error(got_np, ref), "bias": abs(scale_bias(got_np, ref))}
    if kind in ROW_KINDS:
        measures["row"] = row_error(got_np, ref, tau=u, tiny=SMALLEST_NORMAL[dname])
    for key, value in measures.items():
        assert value <= ROUNDOFF[key] * u, (
            f"{where}: {key} error {value:.3e} > {ROUNDOFF[key]:g} u = {ROUNDOFF[key] * u:.3e} "
            f"(max error {abs_err:.3e})")


class PeakTracker:
    """High-water mark of CuPy's memory pool during a block, above what was in use before."""

    def __init__(self, cp):
        self.cp, self.pool = cp, cp.get_default_memory_pool()

    def __enter__(self):
        self.base = self.pool.used_bytes()
        self.peak = self.base
        pool = self.pool

        def malloc(size):
            mem = pool.malloc(size)
            self.peak = max(self.peak, pool.used_bytes())
            return mem
        self.cp.cuda.set_allocator(malloc)
        return self

    def __exit__(self, *exc):
        self.cp.cuda.set_allocator(self.pool.malloc)

    @property
    def above(self):
        return self.peak - self.base


# -- every kernel family on the GPU -------------------------------------------------------------
# (forward tile, backward tile) of each family, the dtypes it runs and the dQ modes of its
# backward (True: deterministic dQ in its own pass; False: dQ by atomics). test_variants runs
# the mask variants through them, test_layout_families issue 12's layouts.

def _families():
    from cuflash import TileConfig as C
    simt = (C(64, 64, 8, 1), C(32, 64, 4, 1))
    return {
        "simt": ((np.float32, np.float64, np.float16), simt, (True, False)),
        "mma": (("float16", "bfloat16"), (C(64, 32, 4, 2, "mma"), C(64, 64, 4, 1, "mma")),
                (True,)),
        "mma_atomic": (("float16", "bfloat16"),
                       (C(64, 32, 4, 1, "mma"), C(64, 128, 8, 2, "mma")), (False,)),
        "wgmma": (("float16", "bfloat16"),
                  (C(128, 64, 8, 3, "wgmma"), C(64, 64, 4, 2, "wgmma")), (True,)),
        # the warp-specialized forward and dK/dV kernels (a producer warpgroup, two consumers)
        "wgmma_ws": (("float16", "bfloat16"),
                     (C(128, 128, 12, 2, "wgmma"), C(64, 128, 12, 2, "wgmma")), (True, False)),
        "dmma": ((np.float64,), (C(64, 32, 4, 2, "dmma"), C(32, 32, 4, 2, "dmma")), (True,)),
    }


KERNEL_FAMILIES = _families()


def family_cases():
    """pytest params (family, dtype, (forward tile, backward tile), dQ modes) of every family
    and dtype it runs (dtype None: bfloat16 without ml_dtypes)."""
    out = []
    for fam, (dts, tiles, dets) in KERNEL_FAMILIES.items():
        for dt in dts:
            dt = DTYPES[dt] if isinstance(dt, str) else np.dtype(dt)
            out.append(pytest.param(fam, dt, tiles, dets,
                                    id=f"{fam}-{dtype_name(dt) if dt is not None else 'bf16'}"))
    return out


def skip_without_nvrtc():
    """Skip a test that compiles kernels with NVRTC (no GPU needed) where CuPy's NVRTC binding
    or the CUDA headers are missing."""
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from cuflash.gpu import build
    if build.cuda_include_dir() is None:
        pytest.skip("CUDA headers not found")


def skip_unless_tile_fits(tile, d, dtype, *, passes=("fwd",)):
    """Skip a kernel test whose tile this GPU cannot run at head dim d (plan.check_tile against
    the device's arch and shared memory), for each of ``passes`` ('fwd', 'bwd')."""
    from cuflash.gpu import plan
    from cuflash.gpu.ops import device_arch, smem_limit
    try:
        for pass_ in passes:
            plan.check_tile(tile, d, dtype_name(dtype), backward=pass_ == "bwd",
                            smem_limit=smem_limit(), arch=device_arch())
    except ValueError as exc:
        pytest.skip(f"tile not valid here: {exc}")


def skip_family_here(fam, dtype):
    """Skip what this GPU cannot run: wgmma before sm_90, dmma before sm_80, bfloat16 without
    ml_dtypes."""
    from cuflash.gpu.ops import device_arch
    if fam.startswith("wgmma") and device_arch() != "sm_90":
        pytest.skip("wgmma kernels need an sm_90 GPU")
    if fam == "dmma" and int(device_arch()[3:5]) < 80:
        pytest.skip("dmma kernels need an sm_80 or later GPU")
    if dtype is None:
        pytest.skip("no bfloat16 (ml_dtypes)")
