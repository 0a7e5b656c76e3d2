"""cuflash.mask_mod: evaluate() against plain Python, the C++ translation compiled by NVRTC, the
same translation compiled for the host by g++ and run against evaluate() (the two backends compute
one function), key() stability, and every error path with its message."""
import itertools
import random
import shutil
import subprocess

import numpy as np
import pytest

from cuflash.mask_mod import MaskMod

RNG = np.random.default_rng(0)
B, H, T, S = 2, 3, 13, 17
IDS_Q = np.sort(RNG.integers(0, 4, (B, T)), axis=1)
IDS_K = np.sort(RNG.integers(0, 4, (B, S)), axis=1)
IDS = np.sort(RNG.integers(0, 3, (B, T)), axis=1)
FUNCS = {"abs": abs, "min": min, "max": max}


def _examples():
    """(mask, reference over Python ints) for the examples of the module docstring."""
    return [
        (MaskMod("(j <= i) | (j < prefix)", prefix=5), lambda b, h, i, j: j <= i or j < 5),
        (MaskMod("doc_q[b, i] == doc_k[b, j]", doc_q=IDS_Q, doc_k=IDS_K),
         lambda b, h, i, j: IDS_Q[b][i] == IDS_K[b][j]),
        (MaskMod("(i - j) % 4 == 0"), lambda b, h, i, j: (i - j) % 4 == 0),
        (MaskMod("(doc[b, i] == doc[b, j]) & (j <= i)", doc=IDS),
         lambda b, h, i, j: IDS[b][i] == IDS[b][j] and j <= i),
        (MaskMod("(h % 2 == 0) | (abs(i - j) <= w)", w=3),
         lambda b, h, i, j: h % 2 == 0 or abs(i - j) <= 3),
    ]


def _grid(nb, nh, vi, vj):
    """Broadcast index arrays over (b, h, i, j) and the same points as Python tuples."""
    b, h, i, j = (np.asarray(v).reshape([-1 if k == n else 1 for k in range(4)])
                  for n, v in enumerate((range(nb), range(nh), vi, vj)))
    return (b, h, i, j), list(itertools.product(range(nb), range(nh), list(vi), list(vj)))


def _reference(ref, points, shape):
    return np.array([bool(ref(*p)) for p in points]).reshape(shape)


# Tricky semantics over i, j in [-9, 9] (no arrays): Python's own eval is the reference.
TRICKY = ["(i // 3 == -2) | (j % -4 == -1)", "(i - j) // -3 >= (i % 5) - 2",
          "-7 // j > i if j != 0 else i < 0", "0 <= i - j < 4", "-2 < i < j <= 5 != h",
          "min(i, j, -3) == max(i // 2, -j) - 1", "abs(i * j) % 7 < abs(j - 4)",
          "(i if i > j else j) % 3 == h", "(i > 0) == (j > 0)", "(i < 0) ^ (j >= 2) ^ True",
          "not (i > j) and j - i < 5 or i == -9", "(i * 1000003) % 1024 == j + 9 + h",
          "+i - (-j) == 0 or False", "i % (j if j != 0 else 1) == 0"]


@pytest.mark.parametrize("case", range(5))
def test_examples_against_python(case):
    mask, ref = _examples()[case]
    s = T if "doc[" in mask.expr else S          # one id array for queries and keys: S = T
    idx, points = _grid(B, H, range(T), range(s))
    got = mask.evaluate(*idx)
    assert got.dtype == bool and got.shape == (B, H, T, s)
    assert np.array_equal(got, _reference(ref, points, got.shape))


@pytest.mark.parametrize("expr", TRICKY)
def test_tricky_semantics_against_python(expr):
    vi = vj = range(-9, 10)
    idx, points = _grid(1, 2, vi, vj)
    mask = MaskMod(expr)
    want = _reference(lambda b, h, i, j: eval(expr, dict(FUNCS), dict(b=b, h=h, i=i, j=j)),
                      points, (1, 2, 19, 19))
    assert np.array_equal(mask.evaluate(*idx), want)


def test_random_grids_and_scalars():
    mask = MaskMod("(doc[b, i] == doc[b, j]) & (j <= i) | ((i - j) % 5 == h)", doc=IDS)
    for _ in range(20):
        b, h = RNG.integers(0, B, 40), RNG.integers(0, H, 40)
        i, j = RNG.integers(0, T, 40), RNG.integers(0, T, 40)
        want = [(IDS[b_][i_] == IDS[b_][j_] and j_ <= i_) or (i_ - j_) % 5 == h_
                for b_, h_, i_, j_ in zip(b, h, i, j)]
        assert mask.evaluate(b, h, i, j).tolist() == want
    assert mask.evaluate(1, 0, 4, 4).shape == () and bool(mask.evaluate(1, 0, 4, 4))
    assert mask.evaluate(np.int16(1), 0, np.arange(3, dtype=np.uint8), 0).shape == (3,)


def test_not_and_invert_are_logical():
    m = MaskMod("~(i < j) & (not (j == 2))")
    assert m.evaluate(0, 0, np.arange(4)[:, None], np.arange(4)).tolist() == [
        [i >= j and j != 2 for j in range(4)] for i in range(4)]


def test_constant_and_unused_variables_broadcast():
    got = MaskMod("True").evaluate(np.arange(2)[:, None], 0, np.arange(3), 5)
    assert got.shape == (2, 3) and got.all() and got.flags.writeable
    got = MaskMod("h == 1").evaluate(0, np.arange(2)[:, None], 0, np.arange(4))
    assert got.tolist() == [[False] * 4, [True] * 4]


def test_guards_skip_checks_where_unused():
    """Indices, divisors and overflow are checked only where the value is used (ternary branch
    taken, right side of a decided and/or/chain), as Python would evaluate them."""
    lens = np.array([3, 5], dtype=np.int64)
    m = MaskMod("(j < n) and (x[j] > 0)", n=3, x=np.array([1, 0, 2]))
    assert m.evaluate(0, 0, 0, np.arange(6)).tolist() == [True, False, True, False, False, False]
    m = MaskMod("j < lens[b] if b < 2 else False", lens=lens)
    assert m.evaluate(np.arange(4)[:, None], 0, 0, np.arange(6)).sum() == 8
    m = MaskMod("(j == 0) or (i // j > 1)")
    assert m.evaluate(0, 0, 5, np.arange(4)).tolist() == [True, True, True, False]
    m = MaskMod("i < 0 < i * 100000 * 100000")
    assert not m.evaluate(0, 0, np.arange(5), 0).any()
    with pytest.raises(IndexError, match=r"index 0 \('j'\) of 'x\[j\]' ranges over \[0, 5\]"):
        MaskMod("(j < n) & (x[j] > 0)", n=3, x=np.array([1, 0, 2])).evaluate(0, 0, 0, np.arange(6))


def test_evaluate_checks():
    doc = MaskMod("doc[b, i - 1] == doc[b, j]", doc=IDS)
    with pytest.raises(IndexError, match=r"index 1 \('i - 1'\) of 'doc\[b, i - 1\]' ranges over "
                       r"\[-1, 2\] but doc has shape \(2, 13\): valid indices are 0 <= index < "
                       r"13 .*NumPy evaluation raises, CUDA clamps"):
        doc.evaluate(0, 0, np.arange(4), 0)
    with pytest.raises(IndexError, match=r"index 0 \('b'\).*\[0, 2\].*0 <= index < 2"):
        doc.evaluate(np.arange(3), 0, 1, 0)
    with pytest.raises(ZeroDivisionError, match=r"'j' is 0 in 'i % j'"):
        MaskMod("i % j == 0").evaluate(0, 0, 1, np.arange(3))
    with pytest.raises(OverflowError, match=r"'i \* i' takes values in \[0, 10000000000\], "
                       r"outside int32"):
        MaskMod("i * i > j").evaluate(0, 0, np.array([0, 100000]), 0)
    with pytest.raises(OverflowError, match="index variable i"):
        MaskMod("i > j").evaluate(0, 0, 2**31, 0)
    with pytest.raises(TypeError, match="j must be an int or an integer array, got ndarray "
                       "float64"):
        MaskMod("i > j").evaluate(0, 0, 0, np.zeros(3))
    with pytest.raises(TypeError, match="i must be an int or an integer array, got bool"):
        MaskMod("i > j").evaluate(0, 0, True, 0)


# -- the C++ translation -----------------------------------------------------------------------

def _params_struct():
    return ("struct Params { const int* mm_tensor[4]; int mm_shape[4][4]; int mm_int[4]; };\n")


@pytest.fixture(scope="module")
def nvrtc():
    nv = pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="CuPy's NVRTC not importable")
    try:
        nv.getVersion()
    except Exception as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"NVRTC unavailable: {exc}")
    return nv


def _ptx(nv, src):
    from cuflash.gpu import build
    prog = nv.createProgram(src, "mask_mod_test.cu", [], [])
    try:
        nv.compileProgram(prog, list(build.options(("-arch=compute_80",))))
    except Exception as exc:
        raise AssertionError(f"NVRTC failed:\n{nv.getProgramLog(prog)}\n{src}") from exc
    return nv.getPTX(prog).decode()


def _probe_source(mask):
    """A translation unit: the mask and a kernel writing visible(b[t], h[t], i[t], j[t]) to
    out[t], its parameter struct filled from plain pointer arguments."""
    return (mask.cuda_source() + _params_struct()
            + 'extern "C" __global__ void probe(const int* t0, const int* t1, const int* t2, '
            "const int* t3, const int* shapes, const int* ints, const int* bs, const int* hs, "
            "const int* is, const int* js, int n, bool* out) {\n"
            "    Params p;\n    const int* ts[4] = {t0, t1, t2, t3};\n"
            "    for (int a = 0; a < 4; ++a) { p.mm_tensor[a] = ts[a]; p.mm_int[a] = ints[a];\n"
            "        for (int d = 0; d < 4; ++d) p.mm_shape[a][d] = shapes[a * 4 + d]; }\n"
            "    int t = blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"    if (t < n) out[t] = cuflash::MaskMod_{mask.key()}::visible(p, bs[t], hs[t], "
            "is[t], js[t]);\n}\n")


@pytest.mark.parametrize("case", range(5))
def test_cuda_source_compiles_with_nvrtc(nvrtc, case):
    mask = _examples()[case][0]
    src = mask.cuda_source()
    assert f"struct MaskMod_{mask.key()} " in src and "static constexpr bool kActive = true;" in src
    assert "template <class P>" in src and "namespace cuflash" in src
    assert ".entry probe" in _ptx(nvrtc, _probe_source(mask))


def test_int32_edges_and_depth(nvrtc):
    """Fuzz (session 38): int32's least value as a literal was refused (its digits alone do not
    fit), a uint64 index past int32 wrapped to -1 and gave a wrong mask (a Python int past int64
    a raw NumPy error), and a deeply nested expression a bare RecursionError."""
    least = MaskMod("i > -2147483648")
    assert least.evaluate(0, 0, np.array([-2**31, 0]), 0).tolist() == [False, True]
    assert "(i > (-2147483647 - 1))" in least.cuda_source()
    assert ".entry probe" in _ptx(nvrtc, _probe_source(least))
    with pytest.raises(ValueError, match="int literal '2147483648' is outside int32"):
        MaskMod("i > 2147483648")
    for b in (np.array([2**64 - 1], np.uint64), 2**64 - 1, 2**70):
        with pytest.raises(OverflowError, match=r"mask_mod: index variable b.* outside int32"):
            MaskMod("b < 0").evaluate(b, 0, 0, 0)
    for expr in (" + ".join(["i"] * 1000) + " < j", "-" * 400 + "i < j"):
        with pytest.raises(ValueError, match="mask_mod: .* nests too deeply"):
            MaskMod(expr)


def test_two_masks_in_one_translation_unit(nvrtc):
    a, b = MaskMod("(i - j) // 3 == 0"), MaskMod("j % k == 0", k=3)
    kernel = (f'extern "C" __global__ void probe(Params p, bool* out) {{\n'
              f"    out[0] = cuflash::MaskMod_{a.key()}::visible(p, 0, 0, 1, 2) && "
              f"cuflash::MaskMod_{b.key()}::visible(p, 0, 0, 1, 2);\n}}\n")
    assert a.cuda_source().count("#ifndef CUFLASH_MASK_MOD_HELPERS") == 1
    assert ".entry probe" in _ptx(nvrtc, a.cuda_source() + b.cuda_source() + _params_struct()
                                  + kernel)


def test_translation_text():
    src = MaskMod("(i // 2 == j % 3) & (abs(min(i, j)) <= max(i, j)) & (x[b, h, i] == n)",
                  x=np.zeros((1, 1, 1), np.int8), n=0).cuda_source()
    for piece in ("mm_floordiv(i, 2)", "mm_floormod(j, 3)", "mm_abs(mm_min(i, j))",
                  "mm_max(i, j)", "p.mm_int[0]", "p.mm_tensor[0][((mm_clamp(b, p.mm_shape[0][0])"
                  " * p.mm_shape[0][1] + mm_clamp(h, p.mm_shape[0][1])) * p.mm_shape[0][2] + "
                  "mm_clamp(i, p.mm_shape[0][2]))]", "long long mm_clamp"):
        assert piece in src, piece


# Agreement cases: (expr, captures, b range, h range, i values, j values); arrays indexed in range.
W = np.array([[3, -1, 4, 1, -5], [9, 2, -6, 5, 3]], dtype=np.int64)
AGREE = [(e, {}, 1, 2, range(-9, 10), range(-9, 10)) for e in TRICKY] + [
    (m.expr, dict(m.ints() + m.arrays()), B, H, range(T), range(T if "doc[" in m.expr else S))
    for m, _ in _examples()] + [
    ("(j < n) and (x[j] > 0)", dict(n=3, x=np.array([1, 0, 2])), 1, 1, range(3), range(8)),
    ("w[b, (i * 7 + j) % 5] > j - i if i != j else w[b, 0] % 2 == 0", dict(w=W), 2, 1,
     range(-6, 6), range(-6, 6)),
    ("t[h % 2, 1, 0, i // 4] - k >= j", dict(t=np.arange(-8, 8).reshape(2, 2, 1, 4), k=-3),
     1, 3, range(16), range(-4, 12)),
]


def _fuzz_exprs(n, seed=1):
    """Random int/bool expressions with every operator, divisors either nonzero literals or
    guarded by a ternary."""
    rnd = random.Random(seed)

    def ie(d):
        if d == 0:
            return rnd.choice(["i", "j", "h", "b", str(rnd.randint(-7, 7)), "k"])
        r = rnd.randrange(8)
        x, y = ie(d - 1), ie(d - 1)
        if r < 3:
            return f"({x} {rnd.choice('+-*')} {y})"
        if r == 3:
            return f"({x} {rnd.choice(['//', '%'])} {rnd.choice([-5, -3, -2, 2, 3, 7])})"
        if r == 4:
            return f"({x} {rnd.choice(['//', '%'])} {y} if {y} != 0 else {x})"
        if r == 5:
            return f"{rnd.choice(['min', 'max'])}({x}, {y})"
        return f"abs({x})" if r == 6 else f"({x} if {be(0)} else {y})"

    def be(d):
        r = rnd.randrange(5) if d else 0
        if r == 0:
            return f"({ie(1)} {rnd.choice(['<', '<=', '>', '>=', '==', '!='])} {ie(1)})"
        if r == 1:
            return f"({ie(1)} <= {ie(1)} < {ie(1)})"
        if r == 2:
            return f"(not {be(d - 1)})" if rnd.random() < .5 else f"(~{be(d - 1)})"
        return f"({be(d - 1)} {rnd.choice(['&', '|', '^', 'and', 'or', '==', '!='])} {be(d - 1)})"

    out = []
    while len(out) < n:
        e = be(3)
        if "k" in e:
            out.append(e)
    return out


FUZZ = _fuzz_exprs(40)


def _host_program(cases):
    """A C++ program: the cuda_source() text of every case with __device__ stripped, printing
    each mask over its grid as one line of 0/1."""
    parts = ["#include <cstdio>\n#define __device__\n#define __forceinline__ inline\n",
             _params_struct()]
    mains = []
    for n, (mask, nb, nh, vi, vj) in enumerate(cases):
        parts.append(mask.cuda_source())
        fill = []
        for t, (name, arr) in enumerate(mask.arrays()):
            vals = ", ".join(map(str, arr.ravel().tolist()))
            parts.append(f"static const int arr{n}_{t}[] = {{{vals}}};\n")
            fill.append(f"p.mm_tensor[{t}] = arr{n}_{t};")
            fill += [f"p.mm_shape[{t}][{d}] = {s};" for d, s in enumerate(arr.shape)]
        fill += [f"p.mm_int[{t}] = {v};" for t, (_, v) in enumerate(mask.ints())]
        vi_s, vj_s = ", ".join(map(str, vi)), ", ".join(map(str, vj))
        mains.append(
            f"  {{ Params p = {{}}; {' '.join(fill)}\n"
            f"    const int vi[] = {{{vi_s}}}, vj[] = {{{vj_s}}};\n"
            f"    for (int b = 0; b < {nb}; ++b) for (int h = 0; h < {nh}; ++h)\n"
            f"    for (int i : vi) for (int j : vj)\n"
            f"      std::putchar(cuflash::MaskMod_{mask.key()}::visible(p, b, h, i, j) "
            f"? '1' : '0');\n"
            f"    std::putchar('\\n'); }}\n")
    return "".join(parts) + "int main() {\n" + "".join(mains) + "  return 0;\n}\n"


def test_host_translation_agrees_with_evaluate(tmp_path):
    """The key test: the C++ text the kernels compile, built for the host by g++, computes the
    same mask as evaluate() (floor //, %, abs/min/max, ternaries, guards, array offsets)."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not found")
    cases = [(MaskMod(e, **caps), nb, nh, list(vi), list(vj))
             for e, caps, nb, nh, vi, vj in AGREE]
    cases += [(MaskMod(e, k=k), 2, 2, list(range(-7, 8)), list(range(-7, 8)))
              for e, k in zip(FUZZ, itertools.cycle([-4, 3, 0, 6]))]
    (tmp_path / "m.cpp").write_text(_host_program(cases))
    subprocess.run([gxx, "-std=c++17", "-O1", "-Wall", "-Werror", "-o", str(tmp_path / "m"),
                    str(tmp_path / "m.cpp")], check=True, capture_output=True, text=True)
    lines = subprocess.run([str(tmp_path / "m")], check=True, capture_output=True,
                           text=True).stdout.split()
    assert len(lines) == len(cases)
    for (mask, nb, nh, vi, vj), line in zip(cases, lines):
        idx, _ = _grid(nb, nh, vi, vj)
        want = "".join("1" if v else "0" for v in mask.evaluate(*idx).ravel())
        assert line == want, mask


# -- key, accessors ----------------------------------------------------------------------------

def test_key():
    a = MaskMod("(j <= i) | (j < prefix)", prefix=16)
    assert a.key() == a.key() and len(a.key()) == 12 and int(a.key(), 16) >= 0
    assert MaskMod("(j<=i)|(j<prefix)", prefix=99).key() == a.key()       # values and spacing
    assert MaskMod("(j <= i) | (j < prefix)", prefix=np.int64(3)).key() == a.key()
    assert MaskMod("(j <= i) | (j < prefix)", prefix=16).cuda_source() == a.cuda_source()
    assert MaskMod("(j < i) | (j < prefix)", prefix=16).key() != a.key()
    one, two = np.zeros(4, np.int32), np.zeros((2, 4), np.int32)
    assert (MaskMod("d[i] == d[j]", d=one).key() == MaskMod("d[i] == d[j]", d=one + 5).key()
            == MaskMod("d[i] == d[j]", d=np.zeros(9, np.uint16)).key())
    assert MaskMod("d[i] == d[j]", d=one).key() != MaskMod("d[b, i] == d[b, j]", d=two).key()
    x = MaskMod("p[i] == q[j]", p=one, q=one)
    assert x.key() != MaskMod("p[i] == q[j]", q=one, p=one).key()        # slot order differs


def test_accessors_and_repr():
    ids = np.asfortranarray(np.arange(12, dtype=np.uint8).reshape(3, 4))
    m = MaskMod("(ids[b, i] == ids[b, j]) | (j < n) | (i < lo[h])", n=5, ids=ids,
                lo=np.array([1, 2], np.int64))
    assert [n for n, _ in m.arrays()] == ["ids", "lo"] and m.ints() == [("n", 5)]
    for _, arr in m.arrays():
        assert arr.dtype == np.int32 and arr.flags.c_contiguous
    assert np.array_equal(m.arrays()[0][1], ids)
    assert m.uses() == frozenset("bhij") and MaskMod("i > 3").uses() == frozenset("i")
    assert m.expr == "(ids[b, i] == ids[b, j]) | (j < n) | (i < lo[h])"
    assert repr(m) == ("MaskMod('(ids[b, i] == ids[b, j]) | (j < n) | (i < lo[h])', n=5, "
                       "ids=<int32 array (3, 4)>, lo=<int32 array (2,)>)")
    assert isinstance(m.evaluate(0, 0, 0, 0, xp=np), np.ndarray)


# -- errors ------------------------------------------------------------------------------------

ERRORS = [
    ("x.y > 0", dict(x=1), ValueError,
     "mask_mod: attribute access 'x.y' is not allowed in 'x.y > 0'"),
    ("i <", {}, ValueError, r"syntax error in 'i <' at line 1, column 4: .*\n    i <\n       \^"),
    ("i / 2 > j", {}, ValueError, r"true division '/' \(use '//'\) 'i / 2' is not allowed"),
    ("i ** 2 > j", {}, ValueError, r"power '\*\*' 'i \*\* 2' is not allowed"),
    ("i in j", {}, ValueError, "membership test 'i in j' is not allowed in 'i in j'"),
    ("i > 0.5", {}, ValueError,
     "float literal '0.5' in 'i > 0.5' is not allowed; only int literals"),
    ("i > 2**40", {}, ValueError, r"power"),
    ("i > 4294967296", {}, ValueError, "int literal '4294967296' is outside int32"),
    ("k < i", dict(w=1), ValueError, "unknown name 'k' in 'k < i'; valid names: b, h, i, j, w "
     r"\(and the functions abs, min, max\)"),
    ("foo(i) > 0", {}, ValueError,
     r"call 'foo\(i\)' in 'foo\(i\) > 0' is not allowed; the functions "
     "are abs, min, max"),
    ("abs(i, j) > 0", {}, ValueError,
     r"abs\(\) takes one positional argument, got 'abs\(i, j\)' in"),
    ("min(i) > 0", {}, ValueError,
     r"min\(\) takes two or more positional arguments, got 'min\(i\)'"),
    ("i[0] > 0", {}, TypeError,
     r"'i\[0\]' indexes 'i', which is an int, in 'i\[0\] > 0'; only captured arrays \(none\)"),
    ("d[i:j] > 0", dict(d=np.zeros(3, int)), ValueError, "slice 'i:j' is not allowed"),
    ("d[b] > 0", dict(d=np.zeros((2, 3), int)), ValueError,
     r"'d\[b\]' in 'd\[b\] > 0' has 1 indices but d has 2 dims; give exactly 2"),
    ("d > 0", dict(d=np.zeros((2, 3), int)), TypeError,
     r"'d' is an array capture with 2 dims; index it as d\[..., ...\]"),
    ("d[i > 0] > 0", dict(d=np.zeros(3, int)), TypeError, "index of d needs an int, got bool"),
    ("i & j", {}, TypeError, r"'&' \(logical on bools; compare ints first\) needs a bool, got "
     "int 'i'"),
    ("(i < j) + 1 > 0", {}, TypeError, r"'\+' needs an int, got bool '\(i < j\)'|'\+' needs an "
     "int, got bool 'i < j'"),
    ("i - j", {}, TypeError, "the expression must be a bool .* got int 'i - j'"),
    ("1 if i else 0", {}, TypeError, "the condition of 'if' needs a bool, got int 'i'"),
    ("(i < j) if j > 0 else i", {}, TypeError, "branches of .* must have one type, got bool"),
    ("(i < j) < (j < i)", {}, TypeError,
     r"comparison '<' needs two ints \(or two bools for == and !=\), got bool 'i < j' and bool "
     r"'j < i' in '\(i < j\) < \(j < i\)'$"),
    ("i == (j < 2)", {}, TypeError, "comparison '==' needs two ints"),
    ("not i", {}, TypeError, "'not' needs a bool, got int 'i'"),
    ("-(i < j)", {}, TypeError, "unary '-' needs an int, got bool"),
    ("[i] == [j]", {}, ValueError, "list '\\[i\\]' is not allowed"),
    ("i > 0", dict(w=1), ValueError, "capture 'w' is not used in 'i > 0'"),
    ("i > j", dict(i=3), ValueError, "capture 'i' is named like an index variable"),
    ("i > min", dict(min=3), ValueError, "capture 'min' is named like a function"),
    ("i > x", dict(x=1.5), TypeError,
     r"capture x=1.5 is a float; a capture is an int or an integer numpy/cupy array"),
    ("i > x", dict(x=True), TypeError, "capture x=True is a bool"),
    ("i > x", dict(x=[1, 2]), TypeError, r"capture x=\[1, 2\] is a list"),
    ("i > x", dict(x=2**31), ValueError, "capture x=2147483648 is outside int32"),
    ("x[i] > 0", dict(x=np.zeros(3)), TypeError, "capture 'x' is a float64 array; captured arrays "
     "must have an integer dtype"),
    ("x[i] > 0", dict(x=np.array([0, 2**31])), ValueError,
     r"capture 'x' has values in \[0, 2147483648\], outside int32"),
    ("x > 0", dict(x=np.array(3)), ValueError,
     "capture 'x' has 0 dims.*pass a 0-d array as an int"),
    ("x[i, i, i, i, i] > 0", dict(x=np.zeros((1,) * 5, int)), ValueError,
     r"capture 'x' has 5 dims \(shape \(1, 1, 1, 1, 1\)\); captured arrays have 1 to 4 dims"),
    ("a[i]+b_[i]+c[i]+d[i]+e[i] > 0", {n: np.zeros(2, int) for n in ["a", "b_", "c", "d", "e"]},
     ValueError, "capture 'e' is array number 5; at most 4 array captures \\(a, b_, c, d already"),
    ("p+q+r+s+t > i", {n: 1 for n in "pqrst"}, ValueError,
     "capture 't' is int number 5; at most 4 int captures"),
]


@pytest.mark.parametrize("expr, caps, exc, msg", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors(expr, caps, exc, msg):
    with pytest.raises(exc, match=msg):
        MaskMod(expr, **caps)


def test_expr_must_be_a_string():
    with pytest.raises(TypeError, match="expr must be a str, got int 3"):
        MaskMod(3)


def test_scalar_guards():
    """A guard that is a plain Python bool (from int captures) also decides what is used."""
    x = np.array([5, -1])
    assert not MaskMod("(n > 3) and (x[j] > 0)", n=1, x=x).evaluate(0, 0, 0, np.arange(9)).any()
    assert MaskMod("(n < 3) or (x[j] > 0)", n=1, x=x).evaluate(0, 0, 0, np.arange(9)).all()
    assert MaskMod("x[j] > 0 if n > 0 else i >= 0", n=0, x=x).evaluate(0, 0, 0, np.arange(9)).all()
    assert MaskMod("i // n == 0 if n != 0 else True", n=0).evaluate(0, 0, np.arange(9), 0).all()
    with pytest.raises(ZeroDivisionError, match="'n' is 0 in 'i // n'"):
        MaskMod("i // n == 0 if n == 0 else True", n=0).evaluate(0, 0, np.arange(9), 0)
    with pytest.raises(IndexError, match=r"'x\[j\]' ranges over \[0, 8\]"):
        MaskMod("x[j] > 0 if n > 0 else True", n=1, x=x).evaluate(0, 0, 0, np.arange(9))


def test_host_translation_clamps_indices(tmp_path):
    """Where NumPy raises IndexError, the C++ code reads the clamped index instead."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not found")
    x = np.array([[4, 0, 3, 1, 2], [1, 1, 0, 4, 3]])
    mask, vi, vj = MaskMod("x[h - 1, i] == j", x=x), list(range(-3, 9)), list(range(5))
    (tmp_path / "m.cpp").write_text(_host_program([(mask, 1, 4, vi, vj)]))
    subprocess.run([gxx, "-std=c++17", "-O1", "-o", str(tmp_path / "m"), str(tmp_path / "m.cpp")],
                   check=True, capture_output=True, text=True)
    line = subprocess.run([str(tmp_path / "m")], check=True, capture_output=True,
                          text=True).stdout.strip()
    want = [x[min(max(h - 1, 0), 1), min(max(i, 0), 4)] == j
            for h in range(4) for i in vi for j in vj]
    assert line == "".join("1" if v else "0" for v in want)
    with pytest.raises(IndexError):
        mask.evaluate(*_grid(1, 4, vi, vj)[0])


@pytest.mark.gpu
def test_kernel_and_cupy_evaluate_agree_on_gpu():
    """On a GPU: the translated mask run by a CUDA kernel, evaluate(xp=cupy) and evaluate(numpy)
    give one mask on every agreement case."""
    from cuflash._xp import cupy_module
    from cuflash.gpu import build
    cp = cupy_module()
    for expr, caps, nb, nh, vi, vj in AGREE:
        mask = MaskMod(expr, **{k: cp.asarray(v) if hasattr(v, "shape") else v
                                for k, v in caps.items()})
        idx = [np.ascontiguousarray(np.broadcast_to(a, (nb, nh, len(vi), len(vj))).ravel(),
                                    dtype=np.int32) for a in _grid(nb, nh, vi, vj)[0]]
        want = mask.evaluate(*idx)
        got_cp = mask.evaluate(*map(cp.asarray, idx), xp=cp)
        assert isinstance(got_cp, cp.ndarray) and np.array_equal(got_cp.get(), want), expr
        arrs = [a for _, a in mask.arrays()]
        shapes = np.ones((4, 4), np.int32)
        for t, a in enumerate(arrs):
            shapes[t, :a.ndim] = a.shape
        ints = np.zeros(4, np.int32)
        ints[:len(mask.ints())] = [v for _, v in mask.ints()]
        dummy = cp.zeros(1, cp.int32)
        out = cp.zeros(len(want), dtype=cp.bool_)
        kern = cp.RawModule(code=_probe_source(mask), options=build.options(),
                            backend="nvrtc").get_function("probe")
        n = len(want)
        kern(((n + 127) // 128,), (128,),
             (*(arrs + [dummy] * (4 - len(arrs))), cp.asarray(shapes), cp.asarray(ints),
              *map(cp.asarray, idx), np.int32(n), out))
        assert np.array_equal(out.get(), want), expr
