"""attention_with_kvcache, PagedKVCache and the KV byte arithmetic (cuflash.kvcache).

Every case runs on NumPy (the CPU twin) and, with a GPU, on CuPy (the CUDA kernels), through the
`xp` fixture. Outputs are checked per sequence against the float64 oracle on the concatenated
sequence (cache tokens, then k_new), K/V repeated per query head of a GQA group, with the
project's criterion (assert_matches_oracle against naive in the same precision). Caches hold NaN
in every slot that is not a token of some sequence, so a read past a sequence's end shows.
"""
import math

import numpy as np
import pytest

import cuflash
from cuflash import kvcache
from cuflash._xp import accum_dtype, to_numpy
from cuflash.kvcache import (PagedKVCache, PagePoolExhausted, attention_with_kvcache,
                             cache_waste, decode_step_bytes, kv_cache_bytes)
from cuflash.oracle import oracle_attention
from helpers import (  # poison_gpu_outputs: autouse fixture
    poison_gpu_outputs, ALL_DTYPES, DTYPES, assert_matches_oracle, case_seed, skip_without_nvrtc)

D = 16
PAGE = 16
#: cache lengths before the append: 0 and 1, a page boundary, and equal lengths both apart
#: (sequences 0 and 3: a gathered group) and side by side (4 and 5: a slice)
SEQLENS = (37, 0, 1, 37, 16, 16)


def _slopes(xp, Hq):
    return xp.asarray((0.5 ** np.arange(1, Hq + 1)).astype(np.float32))


class Scenario:
    """Sequences of known tokens in a contiguous or paged cache, with the queries and the
    tokens to append; ``full_k[b]``/``full_v[b]`` (Hkv, L_b, d) on the host are the
    concatenations (cache tokens, then k_new) the oracle sees."""

    def __init__(self, xp, dtype, layout, *, Hq, Hkv, Tq, Tnew, seqlens=SEQLENS, seed=0,
                 page_size=PAGE, d=D):
        rng = np.random.default_rng(seed)
        self.xp, self.dtype, self.layout, self.Tnew = xp, np.dtype(dtype), layout, Tnew
        self.Hq, self.Hkv, self.Tq = Hq, Hkv, Tq
        self.seqlens = np.asarray(seqlens, dtype=np.int32)
        B = len(seqlens)
        lengths = self.seqlens + Tnew
        self.full_k = [rng.standard_normal((Hkv, L, d)).astype(dtype) for L in lengths]
        self.full_v = [rng.standard_normal((Hkv, L, d)).astype(dtype) for L in lengths]
        q = rng.standard_normal((B, Hq, Tq, d)).astype(dtype)
        k_new = np.stack([k[:, s:] for k, s in zip(self.full_k, self.seqlens)]) \
            if B else np.zeros((0, Hkv, Tnew, d), dtype)
        v_new = np.stack([v[:, s:] for v, s in zip(self.full_v, self.seqlens)]) \
            if B else np.zeros((0, Hkv, Tnew, d), dtype)
        if layout == "contiguous":
            s_max = int(lengths.max(initial=0)) + 3
            k_cache = np.full((B, Hkv, s_max, d), np.nan, dtype)
            v_cache = np.full((B, Hkv, s_max, d), np.nan, dtype)
            for b, s in enumerate(self.seqlens):
                k_cache[b, :, :s] = self.full_k[b][:, :s]
                v_cache[b, :, :s] = self.full_v[b][:, :s]
            table = None
        else:
            need = [-(-int(L) // page_size) for L in lengths]
            num_pages = sum(need) + 3
            perm = rng.permutation(num_pages)   # pages scattered over the pool
            width = max(need, default=0) + 1
            table = np.full((B, width), -1, dtype=np.int32)
            k_cache = np.full((num_pages, Hkv, page_size, d), np.nan, dtype)
            v_cache = np.full((num_pages, Hkv, page_size, d), np.nan, dtype)
            at = 0
            for b, s in enumerate(self.seqlens):
                table[b, :need[b]] = perm[at:at + need[b]]
                at += need[b]
                for t in range(s):
                    p, slot = table[b, t // page_size], t % page_size
                    k_cache[p, :, slot] = self.full_k[b][:, t]
                    v_cache[p, :, slot] = self.full_v[b][:, t]
        self.q, self.k_new, self.v_new = (xp.asarray(a) for a in (q, k_new, v_new))
        self.k_cache, self.v_cache = xp.asarray(k_cache), xp.asarray(v_cache)
        self.block_table = None if table is None else xp.asarray(table)
        self.cache_seqlens = xp.asarray(self.seqlens)

    def kwargs(self, append=True):
        kw = dict(cache_seqlens=self.cache_seqlens, block_table=self.block_table)
        if append and self.Tnew:
            kw.update(k_new=self.k_new, v_new=self.v_new)
        return kw

    def call(self, append=True, **options):
        return attention_with_kvcache(self.q, self.k_cache, self.v_cache,
                                      **self.kwargs(append), **options)

    def sequence(self, b):
        """q (Hq, Tq, d), K and V (Hq, L, d) of sequence b on xp: kv heads repeated per group."""
        g = self.Hq // self.Hkv
        rep = lambda a: self.xp.asarray(np.repeat(a, g, axis=0))
        return self.q[b], rep(self.full_k[b]), rep(self.full_v[b])

    def check(self, out, lse, name, **options):
        """Each sequence's out and lse against the oracle on its concatenation."""
        xp = self.xp
        assert out.shape == self.q.shape and out.dtype == self.dtype
        assert lse.shape == self.q.shape[:3] and lse.dtype == accum_dtype(self.dtype)
        assert isinstance(out, type(self.q)) and isinstance(lse, type(self.q))
        for b in range(len(self.seqlens)):
            q, k, v = self.sequence(b)
            ref_out, ref_lse = oracle_attention(q, k, v, **options)
            n_out, n_lse = cuflash.naive_attention(q, k, v, return_lse=True, **options)
            where = f"{name} seq {b} (L={self.seqlens[b] + self.Tnew})"
            assert_matches_oracle(out[b], ref_out, n_out, dtype=self.dtype,
                                  name=f"out {where}", kind="out")
            assert_matches_oracle(lse[b], ref_lse, n_lse, dtype=self.dtype,
                                  name=f"lse {where}", kind="lse")


def _bytes(*arrays):
    return [None if a is None else to_numpy(a).tobytes() for a in arrays]


# (id, Hq, Hkv, Tq, Tnew, options): GQA groups 1, 2, 3 and 4 = Hq; Tq 1, 2, 3, 5, 8; causal and
# not; window, softcap, ALiBi alone and together ("alibi" stands for per-head slopes on xp)
CASES = [
    ("mha-decode", 4, 4, 1, 1, dict(causal=True)),
    ("gqa2-decode-window", 4, 2, 1, 1, dict(causal=True, window=(7, None))),
    ("mqa-decode-softcap", 4, 1, 1, 1, dict(causal=True, softcap=1.5)),
    ("mqa-decode-alibi", 4, 1, 1, 1, dict(causal=True, alibi_slopes="alibi")),
    ("gqa2-tq3-alibi", 4, 2, 3, 3, dict(causal=True, alibi_slopes="alibi")),
    ("mqa-tq8-dense", 4, 1, 8, 0, dict(causal=False)),
    ("gqa3-tq5-all", 6, 2, 5, 2, dict(causal=False, window=(9, 2), softcap=2.0,
                                       alibi_slopes="alibi")),
    ("mha-tq2-window", 4, 4, 2, 2, dict(causal=False, window=(3, 1))),
]


def _options(xp, Hq, options):
    if options.get("alibi_slopes") == "alibi":
        return dict(options, alibi_slopes=_slopes(xp, Hq))
    return dict(options)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("layout", ["contiguous", "paged"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_matches_oracle(xp, dtype, layout, case):
    name, Hq, Hkv, Tq, Tnew, options = case
    sc = Scenario(xp, dtype, layout, Hq=Hq, Hkv=Hkv, Tq=Tq, Tnew=Tnew,
                  seed=case_seed(name, layout, str(dtype)))
    opts = _options(xp, Hq, options)
    out, lse = sc.call(return_lse=True, **opts)
    sc.check(out, lse, f"{layout} {name}", **opts)


@pytest.mark.parametrize("d,page_size,Hq,Hkv,Tq,Tnew", [(64, 32, 8, 8, 4, 20),
                                                   (128, 64, 8, 1, 1, 40),
                                                   (256, 16, 2, 1, 6, 35)])
@pytest.mark.parametrize("layout", ["contiguous", "paged"])
@pytest.mark.parametrize("dtype", [DTYPES["bfloat16"], DTYPES["float32"]], ids=["bf16", "f32"])
def test_larger_head_dims_and_pages(xp, dtype, layout, d, page_size, Hq, Hkv, Tq, Tnew):
    """Longer sequences over several pages, appends that span pages, larger head dims and
    pages, MHA and MQA with Hq = 8 (group 1 and 8)."""
    if dtype is None:
        pytest.skip("ml_dtypes not installed (no bfloat16)")
    sc = Scenario(xp, dtype, layout, Hq=Hq, Hkv=Hkv, Tq=Tq, Tnew=Tnew, d=d,
                  page_size=page_size, seqlens=(0, 1, 100, 31, 100),
                  seed=case_seed("larger", layout, d, str(dtype)))
    opts = dict(causal=True, window=(70, None), softcap=8.0)
    out, lse = sc.call(return_lse=True, **opts)
    sc.check(out, lse, f"{layout} d={d} page={page_size}", **opts)


@pytest.mark.parametrize("strategy,Tq,alibi", [("fold", 1, False), ("broadcast", 1, True),
                                                ("broadcast", 4, False), ("loop", 1, False),
                                                ("loop", 3, True)])
@pytest.mark.parametrize("dtype", [DTYPES["float16"], DTYPES["float32"]], ids=["f16", "f32"])
def test_gqa_strategies(xp, monkeypatch, dtype, strategy, Tq, alibi):
    """Each way the query heads of a group meet their shared K/V, forced (the automatic choice
    takes fold for Tq = 1 without ALiBi, else broadcast on NumPy and loop on CuPy)."""
    monkeypatch.setattr(kvcache, "_GQA_STRATEGY", strategy)
    sc = Scenario(xp, dtype, "paged", Hq=8, Hkv=2, Tq=Tq, Tnew=1,
                  seed=case_seed(strategy, Tq, alibi, str(dtype)))
    opts = dict(causal=True, window=(11, None), softcap=3.0)
    if alibi:
        opts["alibi_slopes"] = _slopes(xp, 8)
    out, lse = sc.call(return_lse=True, **opts)
    sc.check(out, lse, strategy, **opts)


def test_interleaved_k_and_v_caches_append(xp):
    """K and V interleaved in one array ((B, Hkv, S, 2, d)[..., 0, :] and [..., 1, :]) share no
    element: an append writes both in place and the call equals one on separate caches (their
    byte extents meet, which the overlap check once took for an overlap)."""
    rng = np.random.default_rng(case_seed("interleaved"))
    B, H, S, d = 2, 2, 32, 16
    kv = xp.asarray(rng.standard_normal((B, H, S, 2, d)).astype(np.float32))
    k_sep, v_sep = xp.ascontiguousarray(kv[..., 0, :]), xp.ascontiguousarray(kv[..., 1, :])
    q, k_new, v_new = (xp.asarray(rng.standard_normal((B, H, 1, d)).astype(np.float32))
                       for _ in range(3))
    lens = xp.asarray(np.array([3, 17], np.int32))
    outs = [attention_with_kvcache(q, kc, vc, cache_seqlens=lens, k_new=k_new, v_new=v_new,
                                   causal=True)
            for kc, vc in ((kv[..., 0, :], kv[..., 1, :]), (k_sep, v_sep))]
    assert _bytes(outs[0]) == _bytes(outs[1])
    assert _bytes(kv[..., 0, :]) == _bytes(k_sep) and _bytes(kv[..., 1, :]) == _bytes(v_sep)
    assert _bytes(k_sep[0, :, 3], k_sep[1, :, 17]) == _bytes(k_new[0, :, 0], k_new[1, :, 0])
    with pytest.raises(ValueError, match="k_cache and v_cache overlap in memory"):
        attention_with_kvcache(q, kv[..., 0, :], kv[..., 0, :], cache_seqlens=lens, k_new=k_new,
                               v_new=v_new)


@pytest.mark.parametrize("layout", ["contiguous", "paged"])
@pytest.mark.parametrize("dtype", [DTYPES["float16"], DTYPES["float64"]], ids=["f16", "f64"])
def test_append_then_attend_equals_concatenation(xp, dtype, layout):
    """k_new written at cache_seqlens, then attended, gives the bits of attending over a cache
    that already held the concatenation, the cache ends up holding exactly the concatenation
    (every other slot untouched), and cache_seqlens is not modified. Also the same as
    cuflash.attention on each concatenated sequence (MHA, Tq = Tnew = 2)."""
    kw = dict(Hq=3, Hkv=3, Tq=2, Tnew=2, seed=case_seed("append", layout, str(dtype)))
    appended = Scenario(xp, dtype, layout, **kw)
    seqlens_before = _bytes(appended.cache_seqlens)
    out_a, lse_a = appended.call(return_lse=True, causal=True, softcap=4.0)
    assert _bytes(appended.cache_seqlens) == seqlens_before
    # the same sequences with the new tokens already in the cache
    whole = Scenario(xp, dtype, layout, seqlens=tuple(np.array(SEQLENS) + 2), **dict(kw, Tnew=0))
    assert _bytes(appended.k_cache, appended.v_cache) == _bytes(whole.k_cache, whole.v_cache)
    out_w, lse_w = whole.call(return_lse=True, causal=True, softcap=4.0)
    assert _bytes(out_a, lse_a) == _bytes(out_w, lse_w)
    for b in range(len(SEQLENS)):
        q, k, v = appended.sequence(b)
        out_b, lse_b = cuflash.attention(q, k, v, causal=True, softcap=4.0, return_lse=True)
        scale = float(np.abs(to_numpy(out_b).astype(np.float64)).max(initial=0)) or 1.0
        np.testing.assert_allclose(to_numpy(out_a[b]).astype(np.float64),
                                   to_numpy(out_b).astype(np.float64), rtol=0,
                                   atol=4 * np.finfo(dtype).eps * scale)
        np.testing.assert_allclose(to_numpy(lse_a[b]), to_numpy(lse_b), rtol=1e-6, atol=0)


@pytest.mark.parametrize("layout", ["contiguous", "paged"])
def test_decode_loop(xp, layout):
    """Several decode steps (Tq = Tnew = 1, GQA), the caller advancing cache_seqlens: each
    step's output matches the oracle over the tokens so far, and the cache ends up holding every
    token of every sequence in order."""
    dtype = np.dtype(np.float32)
    rng = np.random.default_rng(case_seed("loop", layout))
    B, Hq, Hkv, steps = 4, 4, 2, 3
    start = np.array([0, 1, 15, 31], dtype=np.int32)
    S_max = int(start.max()) + steps
    toks = [rng.standard_normal((Hkv, s + steps, D)).astype(dtype) for s in start]
    vals = [rng.standard_normal((Hkv, s + steps, D)).astype(dtype) for s in start]
    if layout == "contiguous":
        k_cache = np.zeros((B, Hkv, S_max, D), dtype)
        v_cache = np.zeros_like(k_cache)
        for b, s in enumerate(start):
            k_cache[b, :, :s], v_cache[b, :, :s] = toks[b][:, :s], vals[b][:, :s]
        table = None
    else:
        pages = -(-S_max // PAGE)
        k_cache = np.zeros((B * pages, Hkv, PAGE, D), dtype)
        v_cache = np.zeros_like(k_cache)
        table = (np.arange(B * pages).reshape(pages, B).T[:, ::-1]).astype(np.int32)
        for b, s in enumerate(start):
            for t in range(s):
                k_cache[table[b, t // PAGE], :, t % PAGE] = toks[b][:, t]
                v_cache[table[b, t // PAGE], :, t % PAGE] = vals[b][:, t]
        table = xp.asarray(np.ascontiguousarray(table))
    k_cache, v_cache = xp.asarray(k_cache), xp.asarray(v_cache)
    seqlens = start.copy()
    for step in range(steps):
        q = rng.standard_normal((B, Hq, 1, D)).astype(dtype)
        k_new = np.stack([t[:, s:s + 1] for t, s in zip(toks, seqlens)])
        v_new = np.stack([t[:, s:s + 1] for t, s in zip(vals, seqlens)])
        out = attention_with_kvcache(xp.asarray(q), k_cache, v_cache,
                                     cache_seqlens=xp.asarray(seqlens), block_table=table,
                                     k_new=xp.asarray(k_new), v_new=xp.asarray(v_new))
        for b in range(B):
            L = seqlens[b] + 1
            k, v = (np.repeat(a[b][:, :L], Hq // Hkv, axis=0) for a in (toks, vals))
            ref = oracle_attention(q[b], k, v, causal=True)[0]
            naive = cuflash.naive_attention(q[b], k, v, causal=True)
            assert_matches_oracle(out[b], ref, naive, dtype=dtype, name=f"out step {step} b {b}")
        seqlens += 1                      # the caller advances the lengths
    kc, vc = to_numpy(k_cache), to_numpy(v_cache)
    tab = None if table is None else to_numpy(table)
    for b in range(B):
        L = int(seqlens[b])
        if tab is None:
            got_k, got_v = kc[b, :, :L], vc[b, :, :L]
        else:
            got_k = np.concatenate([kc[p] for p in tab[b, :-(-L // PAGE)]], axis=1)[:, :L]
            got_v = np.concatenate([vc[p] for p in tab[b, :-(-L // PAGE)]], axis=1)[:, :L]
        assert np.array_equal(got_k, toks[b]) and np.array_equal(got_v, vals[b])


@pytest.mark.parametrize("num_splits", [1, 3])
def test_num_splits_changes_nothing_yet(xp, num_splits):
    sc = Scenario(xp, np.float32, "paged", Hq=4, Hkv=2, Tq=2, Tnew=0, seed=5)
    base = sc.call(return_lse=True)
    assert _bytes(*sc.call(return_lse=True, num_splits=num_splits)) == _bytes(*base)


def test_default_is_causal_and_out_only(xp):
    sc = Scenario(xp, np.float32, "contiguous", Hq=2, Hkv=2, Tq=3, Tnew=0, seed=6)
    out = sc.call()
    assert not isinstance(out, tuple)
    assert _bytes(out) == _bytes(sc.call(causal=True, return_lse=True)[0])
    # sequence 2 holds one token: with Tq = 3 its first two queries see none (out 0, lse -inf)
    lse = to_numpy(sc.call(return_lse=True)[1])
    assert np.isneginf(lse[2, :, :2]).all() and np.isfinite(lse[2, :, 2]).all()
    assert np.isneginf(lse[1]).all() and not to_numpy(out[1]).any()   # empty sequence


@pytest.mark.parametrize("shape", [(0, 2, 1), (3, 2, 0), (3, 0, 1)], ids=["B0", "Tq0", "Hq0"])
def test_zero_sizes(xp, shape):
    """Batch 0, Tq 0, Hq 0: empty results; with Tq = 0 the append still happens."""
    B, Hq, Tq = shape
    Hkv = 2 if Hq else 1
    sc = Scenario(xp, np.float32, "paged", Hq=Hq, Hkv=Hkv, Tq=Tq, Tnew=1,
                  seqlens=SEQLENS[:B], seed=7)
    out, lse = sc.call(return_lse=True)
    assert out.shape == (B, Hq, Tq, D) and lse.shape == (B, Hq, Tq)
    if B:
        k, _ = (to_numpy(a) for a in (sc.k_cache, sc.v_cache))
        tab = to_numpy(sc.block_table)
        for b, s in enumerate(SEQLENS[:B]):
            assert np.array_equal(k[tab[b, s // PAGE], :, s % PAGE], sc.full_k[b][:, s])


# -- bad input: an error naming the argument, the cache untouched --------------------------------

def _bad_cases(xp):
    """name -> (layout, mutate(kwargs of attention_with_kvcache) -> None, exception, match)."""
    np_ = lambda a: xp.asarray(np.asarray(a))

    def setitem(key, index, value, dtype=np.int32):
        def f(kw):
            a = to_numpy(kw[key]).copy()
            a[index] = value
            kw[key] = np_(a.astype(dtype))
        return f

    def put(key, value):
        def f(kw):
            kw[key] = value(kw) if callable(value) else value
        return f

    def with_pages(p):
        def f(kw):
            n, h, _, d = kw["k_cache"].shape
            kw["k_cache"] = xp.zeros((n, h, p, d), np.float32)
            kw["v_cache"] = xp.zeros((n, h, p, d), np.float32)
        return f

    def shared_page(kw):   # sequence 1 (written at token 0) gets sequence 0's first page
        t = to_numpy(kw["block_table"]).copy()
        t[1, 0] = t[0, 0]
        kw["block_table"] = np_(t)

    def recast(key, dtype):
        return put(key, lambda kw: kw[key].astype(dtype))

    return {
        "seqlens_beyond_contiguous": ("contiguous", setitem("cache_seqlens", 2, 43), ValueError,
                                      r"cache_seqlens\[2\]=43 is beyond the cache.*S_max=42"),
        "seqlens_negative": ("contiguous", setitem("cache_seqlens", 4, -1), ValueError,
                             r"cache_seqlens\[4\]=-1 is beyond the cache: it must be in 0\.\.42"),
        "append_overflows_contiguous": ("contiguous", setitem("cache_seqlens", 5, 41),
                                        ValueError, r"k_new: appending Tnew=2 tokens to "
                                        r"sequence 5 \(cache_seqlens\[5\]=41\) would overflow "
                                        r"the cache: it needs 43 tokens"),
        "seqlens_beyond_pages": ("paged", setitem("cache_seqlens", 1, 65), ValueError,
                                 r"cache_seqlens\[1\]=65 is beyond the cache.*4 pages of 16"),
        "append_overflows_pages": ("paged", setitem("cache_seqlens", 0, 63), ValueError,
                                   r"k_new: appending Tnew=2 tokens to sequence 0 .* would "
                                   r"overflow its pages"),
        "table_past_pool": ("paged", setitem("block_table", (3, 1), 99), ValueError,
                            r"block_table\[3, 1\]=99 points outside the page pool: pages are "
                            r"0\.\.\d+"),
        "table_negative": ("paged", setitem("block_table", (2, 0), -1), ValueError,
                           r"block_table\[2, 0\]=-1 points outside the page pool"),
        "table_written_page_shared": ("paged", shared_page, ValueError,
                                      r"block_table\[1, 0\]=\d+: page \d+ is written by this "
                                      r"call .* block_table\[0, 0\] uses it too"),
        "page_size_24": ("paged", with_pages(24), ValueError,
                         r"page_size \(k_cache.shape\[2\]\)=24: pages must hold a power of two"),
        "page_size_8": ("paged", with_pages(8), ValueError, r"page_size .*=8: pages must hold"),
        "seqlens_int64": ("paged", recast("cache_seqlens", np.int64), TypeError,
                          r"cache_seqlens must have dtype int32, got int64"),
        "seqlens_length": ("paged", put("cache_seqlens", lambda kw: kw["cache_seqlens"][:5]),
                           ValueError, r"cache_seqlens must have shape \(6,\) \(batch,\), got "
                           r"\(5,\)"),
        "seqlens_list": ("paged", put("cache_seqlens", [0] * 6), TypeError,
                         r"cache_seqlens must be a numpy.ndarray or cupy.ndarray, got list"),
        "table_int64": ("paged", recast("block_table", np.int64), TypeError,
                        r"block_table must have dtype int32, got int64"),
        "table_batch": ("paged", put("block_table", lambda kw: kw["block_table"][:4]),
                        ValueError, r"block_table must have shape \(6, \d+\)"),
        "table_rank": ("paged", put("block_table", lambda kw: kw["block_table"][0]),
                       ValueError, r"block_table must have 2 dims"),
        "heads_not_multiple": ("paged", put("q", lambda kw: xp.zeros((6, 3, 2, D), np.float32)),
                               ValueError, r"q's 3 heads \(q.shape\[1\]\) must be a multiple of "
                               r"k_cache's 2 kv heads"),
        "v_cache_dtype": ("contiguous", recast("v_cache", np.float64), TypeError,
                          r"v_cache must have q's dtype float32, got float64"),
        "k_new_dtype": ("paged", recast("k_new", np.float16), TypeError,
                        r"k_new must have q's dtype float32, got float16"),
        "k_new_heads": ("paged", put("k_new", lambda kw: kw["k_new"][:, :1]), ValueError,
                        r"k_new must have shape \(6, 2, 2, 16\).*got \(6, 1, 2, 16\)"),
        "v_new_missing": ("paged", put("v_new", None), ValueError,
                          r"k_new was given without v_new"),
        "v_cache_shape": ("contiguous", put("v_cache", lambda kw: kw["v_cache"][:, :, :-1]),
                          ValueError, r"v_cache must have k_cache's shape"),
        "contiguous_batch": ("contiguous", put("q", lambda kw: kw["q"][:5]), ValueError,
                             r"k_cache.shape\[0\]=6 must equal q's batch 5"),
        "head_dim_260": ("contiguous", put("q", lambda kw: xp.zeros((6, 4, 2, 260), np.float32)),
                         ValueError, r"head_dim=260 \(q.shape\[-1\]\) is not supported"),
        "same_k_v_cache": ("paged", put("v_cache", lambda kw: kw["k_cache"]), ValueError,
                           r"k_cache and v_cache overlap in memory"),
        "num_splits_0": ("paged", put("num_splits", 0), ValueError, r"num_splits=0 must be from 1 to 256"),
        "num_splits_float": ("paged", put("num_splits", 2.0), TypeError,
                             r"num_splits must be an int from 1 to 256 or None, got 2.0"),
        "window": ("paged", put("window", (-2, 0)), ValueError, r"window\[0\] \(left\)=-2"),
        "alibi_shape": ("paged", put("alibi_slopes", lambda kw: xp.ones(3, np.float32)),
                        ValueError, r"alibi_slopes of shape \(3,\) does not broadcast to the "
                        r"leading dims \(6, 4\)"),
        "scale": ("paged", put("scale", 0.0), ValueError, r"scale=0.0 must be finite and > 0"),
        "alibi_logit_limit": ("paged", put("alibi_slopes", lambda kw: xp.full(4, 1e9, np.float32)),
                              ValueError, r"alibi_slopes up to 1e\+09 in magnitude are too large "
                              r"for query-key distances up to \d+ in float32"),
    }


BAD = list(_bad_cases(np))


@pytest.mark.parametrize("case", BAD)
def test_bad_input_leaves_cache_untouched(xp, case):
    layout, mutate, exc, match = _bad_cases(xp)[case]
    sc = Scenario(xp, np.float32, layout, Hq=4, Hkv=2, Tq=2, Tnew=2, seed=8)
    kw = dict(q=sc.q, k_cache=sc.k_cache, v_cache=sc.v_cache, **sc.kwargs())
    mutate(kw)
    before = _bytes(kw["k_cache"], kw["v_cache"], kw["cache_seqlens"], kw.get("block_table"))
    with pytest.raises(exc, match=match):
        attention_with_kvcache(**kw)
    assert _bytes(kw["k_cache"], kw["v_cache"], kw["cache_seqlens"],
                  kw.get("block_table")) == before


def test_read_only_cache_refused():
    sc = Scenario(np, np.float32, "contiguous", Hq=2, Hkv=2, Tq=1, Tnew=1, seed=9)
    sc.v_cache.flags.writeable = False
    before = _bytes(sc.k_cache)
    with pytest.raises(ValueError, match="v_cache is read-only"):
        sc.call()
    assert _bytes(sc.k_cache) == before
    sc.call(append=False)   # reading a read-only cache is fine


def test_device_mismatch(xp):
    if xp is np:
        pytest.skip("needs CuPy arrays to mix with NumPy ones")
    sc = Scenario(xp, np.float32, "paged", Hq=2, Hkv=2, Tq=1, Tnew=1, seed=10)
    before = _bytes(sc.k_cache, sc.v_cache)
    for key in ("cache_seqlens", "block_table", "k_new"):
        kw = dict(sc.kwargs(), **{key: to_numpy(sc.kwargs()[key])})
        with pytest.raises(TypeError, match=rf"inputs mix NumPy and CuPy arrays .*{key}: numpy"):
            attention_with_kvcache(sc.q, sc.k_cache, sc.v_cache, **kw)
    assert _bytes(sc.k_cache, sc.v_cache) == before


# -- PagedKVCache -------------------------------------------------------------------------------

def _chunk(xp, rng, heads, n, dtype=np.float32):
    return xp.asarray(rng.standard_normal((heads, n, D)).astype(dtype))


def test_paged_cache_allocate_append_gather_free(xp):
    rng = np.random.default_rng(11)
    cache = PagedKVCache(6, 2, 16, D, "float32", xp=xp)
    assert cache.k.shape == (6, 2, 16, D) and isinstance(cache.k, type(xp.zeros(1)))
    assert cache.allocate("a") == [] and cache.allocate("b", tokens=17) == [0, 1]
    chunks = {"a": [], "b": []}
    for seq, n in (("a", 5), ("b", 16), ("a", 12), ("b", 3), ("a", 0)):   # across page ends
        k, v = _chunk(xp, rng, 2, n), _chunk(xp, rng, 2, n)
        cache.append(seq, k, v)
        chunks[seq].append((to_numpy(k), to_numpy(v)))
    assert cache.length("a") == 17 and cache.length("b") == 19
    assert cache.pages("a") == [2, 3] and cache.pages("b") == [0, 1]
    assert cache.capacity("b") == 32 and cache.num_free_pages == 2
    for seq in ("a", "b"):
        k, v = cache.gather(seq)
        assert isinstance(k, type(cache.k)) and k.shape == (2, cache.length(seq), D)
        assert np.array_equal(to_numpy(k), np.concatenate([c[0] for c in chunks[seq]], axis=1))
        assert np.array_equal(to_numpy(v), np.concatenate([c[1] for c in chunks[seq]], axis=1))
    table = cache.block_table(["b", "a"], width=3)
    assert table.dtype == np.int32 and to_numpy(table).tolist() == [[0, 1, -1], [2, 3, -1]]
    assert to_numpy(cache.seqlens(["a", "b"])).tolist() == [17, 19]
    assert cache.seqlens(["a"]).dtype == np.int32
    assert cache.free("b") == [0, 1] and cache.num_free_pages == 4
    assert cache.sequences == ["a"]
    assert cache.allocate("c", tokens=40) == [0, 1, 4]          # freed pages first, lowest first
    k, v = cache.gather("c")
    assert k.shape == (2, 0, D)


def test_paged_cache_pool_exhausted(xp):
    rng = np.random.default_rng(12)
    cache = PagedKVCache(3, 1, 16, D, np.float16, xp=xp)
    cache.allocate("a")
    cache.append("a", _chunk(xp, rng, 1, 20, np.float16), _chunk(xp, rng, 1, 20, np.float16))
    before = _bytes(cache.k, cache.v)
    with pytest.raises(PagePoolExhausted, match=r"needs 2 more pages of 16 tokens; 1 of 3 are "
                                                r"free"):
        cache.allocate("b", tokens=17)
    assert cache.sequences == ["a"] and cache.num_free_pages == 1
    with pytest.raises(PagePoolExhausted, match="needs 2 more pages"):
        cache.append("a", _chunk(xp, rng, 1, 30, np.float16), _chunk(xp, rng, 1, 30, np.float16))
    assert cache.length("a") == 20 and cache.pages("a") == [0, 1] and cache.num_free_pages == 1
    assert _bytes(cache.k, cache.v) == before
    cache.append("a", _chunk(xp, rng, 1, 28, np.float16), _chunk(xp, rng, 1, 28, np.float16))
    assert cache.num_free_pages == 0 and cache.length("a") == 48


def test_paged_cache_bad_input(xp):
    cache = PagedKVCache(4, 2, 16, D, "float32", xp=xp)
    cache.allocate(0)
    with pytest.raises(ValueError, match="page_size=24: pages must hold a power of two"):
        PagedKVCache(4, 2, 24, D, "float32", xp=xp)
    with pytest.raises(ValueError, match="num_pages=-1 must be an int >= 0"):
        PagedKVCache(-1, 2, 16, D, "float32", xp=xp)
    with pytest.raises(ValueError, match=r"head_dim=300 is not supported; head_dim must be an "
                                         r"int from 1 to 256"):
        PagedKVCache(4, 2, 16, 300, "float32", xp=xp)   # (refused at the first attend before)
    with pytest.raises(TypeError, match="dtype=int32 is not supported"):
        PagedKVCache(4, 2, 16, D, np.int32, xp=xp)
    with pytest.raises(TypeError, match=r"dtype must be one of .*got None"):   # not float64
        PagedKVCache(4, 2, 16, D, None, xp=xp)
    with pytest.raises(ValueError, match="sequence 0 is already allocated"):
        cache.allocate(0)
    with pytest.raises(KeyError, match="sequence 'x' is not allocated"):
        cache.gather("x")
    good = xp.zeros((2, 3, D), np.float32)
    with pytest.raises(TypeError, match="k must have the cache's dtype float32, got float64"):
        cache.append(0, good.astype(np.float64), good)
    with pytest.raises(ValueError, match=r"v must have shape \(heads=2, tokens=3, head_dim=16\)"):
        cache.append(0, good, good[:, :2])
    with pytest.raises(ValueError, match="advancing 0 by 1 tokens to 1 exceeds its capacity 0"):
        cache.advance(0, 1)
    with pytest.raises(ValueError, match=r"width=0 must be an int >= 1"):
        cache.block_table([0], width=0) if cache.reserve(0, 1) == [0] else None
    assert cache.length(0) == 0 and cache.pages(0) == [0]
    # attend: q's rows are the sequences named (before, a block_table the caller never passed
    # took the blame); nothing reserved
    with pytest.raises(ValueError, match=r"q has 2 sequences \(q.shape\[0\]\) but seqs names 1"):
        cache.attend([0], xp.zeros((2, 2, 1, D), np.float32),
                     xp.zeros((2, 2, 1, D), np.float32), xp.zeros((2, 2, 1, D), np.float32))
    assert cache.length(0) == 0 and cache.pages(0) == [0]


def test_paged_cache_attend(xp):
    """Decode steps through PagedKVCache.attend: pages reserved as sequences grow, lengths
    advanced, outputs against the oracle; a failing step gives its pages back."""
    rng = np.random.default_rng(13)
    dtype = np.dtype(np.float32)
    cache = PagedKVCache(12, 2, 16, D, dtype, xp=xp)
    seqs, host_k, host_v = ["x", "y", "z"], {}, {}
    for s, n in zip(seqs, (0, 1, 31)):
        cache.allocate(s)
        k, v = _chunk(xp, rng, 2, n), _chunk(xp, rng, 2, n)
        cache.append(s, k, v)
        host_k[s], host_v[s] = to_numpy(k), to_numpy(v)
    for step in range(3):
        q = rng.standard_normal((3, 4, 1, D)).astype(dtype)
        k_new = rng.standard_normal((3, 2, 1, D)).astype(dtype)
        v_new = rng.standard_normal((3, 2, 1, D)).astype(dtype)
        out, lse = cache.attend(seqs, xp.asarray(q), xp.asarray(k_new), xp.asarray(v_new),
                                return_lse=True, softcap=5.0)
        for i, s in enumerate(seqs):
            host_k[s] = np.concatenate([host_k[s], k_new[i]], axis=1)
            host_v[s] = np.concatenate([host_v[s], v_new[i]], axis=1)
            k, v = (np.repeat(a[s], 2, axis=0) for a in (host_k, host_v))
            ref = oracle_attention(q[i], k, v, causal=True, softcap=5.0)
            naive = cuflash.naive_attention(q[i], k, v, causal=True, softcap=5.0, return_lse=True)
            assert_matches_oracle(out[i], ref[0], naive[0], dtype=dtype, name=f"out {s} {step}")
            assert_matches_oracle(lse[i], ref[1], naive[1], dtype=dtype, name=f"lse {s} {step}")
            assert cache.length(s) == host_k[s].shape[1]
            assert np.array_equal(to_numpy(cache.gather(s)[0]), host_k[s])
    assert cache.pages("z") == [1, 2, 4] and cache.num_free_pages == 7
    # a failing step (k_new of the wrong head count) takes nothing
    lengths, free = [cache.length(s) for s in seqs], cache.num_free_pages
    before = _bytes(cache.k, cache.v)
    bad = xp.zeros((3, 1, 14, D), dtype)
    with pytest.raises(ValueError, match="k_new must have shape"):
        cache.attend(seqs, xp.asarray(q), bad, bad)
    assert [cache.length(s) for s in seqs] == lengths and cache.num_free_pages == free
    assert _bytes(cache.k, cache.v) == before
    with pytest.raises(ValueError, match="seqs must be distinct"):
        cache.attend(["x", "x"], xp.asarray(q[:2]))


# -- byte arithmetic ----------------------------------------------------------------------------

def test_kv_cache_bytes():
    # a 7B-class model: 32 layers, 32 heads of 128, float16, 4096 tokens: 2 GiB per sequence
    mha = kv_cache_bytes(4096, kv_heads=32, head_dim=128, dtype="float16", layers=32)
    assert mha == 2 * 2 ** 30
    assert kv_cache_bytes(4096, kv_heads=8, head_dim=128, layers=32) * 4 == mha      # GQA, G = 4
    assert kv_cache_bytes(4096, kv_heads=1, head_dim=128, layers=32) * 32 == mha     # MQA
    assert kv_cache_bytes(10, kv_heads=2, head_dim=16, dtype="float32", batch=3) == \
        2 * 3 * 2 * 10 * 16 * 4
    assert kv_cache_bytes(0, kv_heads=2, head_dim=16) == 0
    with pytest.raises(ValueError, match="context=-1 must be an int >= 0"):
        kv_cache_bytes(-1, kv_heads=2, head_dim=16)


def test_cache_waste():
    w = cache_waste([1, 16, 17, 100], page_size=16)
    assert (w.tokens, w.contiguous_slots, w.pages, w.paged_slots) == (134, 400, 11, 176)
    assert math.isclose(w.contiguous_waste, 1 - 134 / 400)
    assert math.isclose(w.paged_waste, 1 - 134 / 176)
    w = cache_waste([0, 5], page_size=16, max_len=64)
    assert (w.tokens, w.contiguous_slots, w.pages, w.paged_slots) == (5, 128, 1, 16)
    assert cache_waste([], page_size=16).paged_waste == 0.0
    with pytest.raises(ValueError, match="max_len=4 is shorter than the longest length 5"):
        cache_waste([5], page_size=16, max_len=4)


def test_decode_step_bytes():
    lens = [10, 20]
    # float16, Hq 8, Hkv 2, d 16, one query and one new token per sequence, contiguous
    kv = 2 * 30 * 2 * 16 * 2
    q_out = 2 * 2 * 8 * 1 * 16 * 2
    lse = 2 * 8 * 4
    new = 2 * 2 * 2 * 2 * 1 * 16 * 2
    got = decode_step_bytes(lens, q_heads=8, kv_heads=2, head_dim=16, dtype="float16")
    assert got == kv + q_out + lse + new + 4 * 2
    # paged: 4 bytes per block_table entry in use (1 + 2 pages of 16)
    assert decode_step_bytes(lens, q_heads=8, kv_heads=2, head_dim=16, page_size=16) == got + 12
    # K/V copied per query head: the K/V reads grow by the group size
    naive = decode_step_bytes(lens, q_heads=8, kv_heads=2, head_dim=16, gqa_aware=False)
    assert naive - got == 3 * kv
    with pytest.raises(ValueError, match="q_heads=6 must be a multiple of kv_heads=4"):
        decode_step_bytes(lens, q_heads=6, kv_heads=4, head_dim=16)


# (id, Hq, Hkv, Tq, Tnew, options) of the one-launch kernel path: the GQA fold (Tq = 1, no ALiBi,
# no left window bound) and the head-per-row form (Tq > 1, ALiBi, a left bound); MHA and MQA
KERNEL_CASES = [
    ("gqa4-fold", 8, 2, 1, 1, dict(causal=True)),
    ("mqa-fold-softcap", 8, 1, 1, 0, dict(causal=True, softcap=4.0)),
    ("gqa4-window", 8, 2, 1, 2, dict(causal=True, window=(90, None))),
    ("gqa2-tq3-alibi", 4, 2, 3, 3, dict(causal=True, alibi_slopes="alibi")),
    ("mha-tq8-dense", 4, 4, 8, 0, dict(causal=False)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", KERNEL_CASES, ids=[c[0] for c in KERNEL_CASES])
@pytest.mark.parametrize("layout,page_size", [("contiguous", PAGE), ("paged", 16), ("paged", 32),
                                              ("paged", 64), ("paged", 128)],
                         ids=["contiguous", "paged16", "paged32", "paged64", "paged128"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_in_kernel_path(monkeypatch, dtype, layout, page_size, case):
    """The whole batch in one launch of the KV-cache kernels (contiguous caches, and pages read
    in place): mixed lengths 0, 1, odd, page-sized and several pages long, against the oracle;
    the launch count shows that no call fell back to the per-length reference path (16-bit
    inputs: every page size; float32/float64: pages of 64 and more)."""
    cp = _gpu_or_skip()
    if dtype is None:
        pytest.skip("ml_dtypes not installed (no bfloat16)")
    calls = _record_launches(monkeypatch)
    monkeypatch.setattr(kvcache, "_PLANS", {})
    name, Hq, Hkv, Tq, Tnew, options = case
    sc = Scenario(cp, dtype, layout, Hq=Hq, Hkv=Hkv, Tq=Tq, Tnew=Tnew, d=64,
                  page_size=page_size, seqlens=(0, 1, 129, 64, 300, 17, 0),
                  seed=case_seed("kernel", name, layout, page_size, str(dtype)))
    opts = _options(cp, Hq, options)
    out, lse = sc.call(return_lse=True, **opts)
    in_kernel = np.dtype(dtype).itemsize == 2 or layout == "contiguous" or page_size >= 64
    assert len(calls) == int(in_kernel), \
        f"{len(calls)} kernel-path launches prepared, expected {int(in_kernel)}"
    sc.check(out, lse, f"{layout} page={page_size} {name}", **opts)
    for splits in (1, 5):   # split-KV given, including splits with no key tile; appended already
        out, lse = attention_with_kvcache(sc.q, sc.k_cache, sc.v_cache, return_lse=True,
                                          cache_seqlens=sc.cache_seqlens + Tnew,
                                          block_table=sc.block_table, num_splits=splits, **opts)
        sc.check(out, lse, f"{layout} page={page_size} {name} splits={splits}", **opts)


@pytest.mark.gpu
@pytest.mark.parametrize("layout,page_size", [("contiguous", PAGE), ("paged", 64)],
                         ids=["contiguous", "paged64"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_split_clusters(monkeypatch, dtype, layout, page_size):
    """Split-KV merged in one thread-block cluster (kvcache.DECODE_CLUSTER, plan.split_cluster;
    kernels_cu/split_combine.cuh, finish_cluster_split) against the oracle, and against the
    merge through L2 (DECODE_CLUSTER = 1): 2, 4 and 8 splits in one cluster; 6 and 16 through L2
    either way; over sequences of 0, 1, odd and long lengths (splits with no key tile among
    them), the GQA fold and one head per row. The launch's cluster size is checked, so that the
    test cannot pass on the L2 path alone; float32 and float64 decode on the CUDA cores
    (kvcache._decode_tile), which merge through L2 (plan.CLUSTER_FAMILIES)."""
    cp = _gpu_or_skip()
    from cuflash.gpu import ops, plan
    if dtype is None:
        pytest.skip("ml_dtypes not installed (no bfloat16)")
    launches = _record_launches(monkeypatch)
    import ml_dtypes
    clusters = plan._sm(ops.device_arch()) >= 90 and \
        np.dtype(dtype).itemsize == 2   # the 16-bit mma decode kernels
    for name, Hq, Hkv, Tq, opts in [("gqa4-fold", 8, 2, 1, dict(causal=True)),
                                     ("mha-tq3-window", 4, 4, 3, dict(causal=True,
                                                                      window=(200, None)))]:
        sc = Scenario(cp, dtype, layout, Hq=Hq, Hkv=Hkv, Tq=Tq, Tnew=0, d=64,
                      page_size=page_size, seqlens=(0, 1, 1203, 77, 2048),
                      seed=case_seed("clusters", name, layout, str(dtype)))
        for splits, want in ((2, 2), (4, 4), (8, 8), (6, 1), (16, 1)):
            got = {}
            for most in (8, 1):
                monkeypatch.setattr(kvcache, "DECODE_CLUSTER", most)
                monkeypatch.setattr(kvcache, "_PLANS", {})
                launches.clear()
                out, lse = sc.call(return_lse=True, num_splits=splits, **opts)
                where = f"{layout} {name} splits={splits} cluster<={most}"
                assert len(launches) == 1, f"{where}: {len(launches)} kernel launches prepared"
                expect = want if most == 8 and clusters else 1
                assert launches[0].cluster == expect, \
                    f"{where}: clusters of {launches[0].cluster}, expected {expect}"
                sc.check(out, lse, where, **opts)
                got[most] = (cp.asnumpy(out).astype(np.float64), cp.asnumpy(lse))
            # the same splits merged two ways: equal to float rounding of the merge
            tol = 4 * float(ml_dtypes.finfo(dtype).eps) if np.dtype(dtype).itemsize <= 4 \
                else 1e-12
            np.testing.assert_allclose(got[8][0], got[1][0], rtol=0, atol=tol,
                                       err_msg=f"{layout} {name} splits={splits}: out")
            np.testing.assert_allclose(got[8][1], got[1][1], rtol=0, atol=1e-5,
                                       err_msg=f"{layout} {name} splits={splits}: lse")


def test_split_cluster_rule():
    """plan.split_cluster: one cluster of all the splits where 2, 4 or 8 of them fit the cap, on
    sm_90 for the 16-bit mma kernels and head dims that are multiples of 4; 1 elsewhere. A Variant
    with clusters names them and needs split=True."""
    from cuflash.gpu import plan
    sc = plan.split_cluster
    assert [sc("mma", 128, n, "sm_90", 8) for n in (1, 2, 3, 4, 6, 8, 12, 16, 64, 128, 5)] == \
        [1, 2, 1, 4, 1, 8, 1, 1, 1, 1, 1]
    assert sc("mma", 128, 8, "sm_90", 4) == 1 and sc("mma", 128, 4, "sm_90", 4) == 4
    assert sc("mma", 128, 2, "sm_90", 1) == 1
    assert sc("tf32", 64, 8, "sm_90", 8) == 1         # no GPU test runs TF32 clusters
    assert sc("mma", 128, 8, "sm_80", 8) == 1          # no clusters before Hopper
    assert sc("wgmma", 128, 8, "sm_90", 8) == 1        # merges through L2
    assert sc("dmma", 128, 8, "sm_90", 8) == 1
    assert sc("mma", 72, 8, "sm_90", 8) == 8 and sc("mma", 42, 8, "sm_90", 8) == 1
    v = plan.Variant("causal", split=True, cache="paged", cluster=4)
    assert v.suffix() == "_causal_split_c4_paged"
    assert v.cpp().endswith(", true, cuflash::kPagedCache, 4>")
    assert plan.Variant(split=True, cluster=2).cpp().endswith(", true, cuflash::kNoCache, 2>")
    with pytest.raises(ValueError, match=r"Variant.cluster=4 .* only with split=True"):
        plan.Variant(cluster=4)
    with pytest.raises(ValueError, match=r"Variant.cluster=3 must be one of \(1, 2, 4, 8\)"):
        plan.Variant(split=True, cluster=3)
    from cuflash import TileConfig
    spec = plan.specs_for("float16", 64, TileConfig(64, 64, 4, 2, "mma"),
                          plan.Variant(split=True, cluster=2), False)[0]
    with pytest.raises(ValueError, match=r"clusters of 2 blocks: thread-block clusters need "
                                         r"sm_90 or later, this GPU is sm_80"):
        plan.validate(spec, arch="sm_80")
    spec = plan.specs_for("float64", 64, TileConfig(32, 32, 4, 1),
                          plan.Variant(split=True, cluster=2), False)[0]
    with pytest.raises(ValueError, match=r"kernel='simt' merges its splits through L2"):
        plan.validate(spec, arch="sm_90")


def test_cluster_decode_kernels_compile_without_spills():
    """NVRTC, sm_90, no GPU: the 16-bit decode tiles with their splits as one cluster of 2 or 8
    blocks (plan.split_cluster; causal, over a contiguous cache and pages, the two stage counts
    of kvcache._decode_split) compile without spills at the registers of the same kernel merging
    through L2 (within 8), carry __cluster_dims__, and hold the cluster's partials (rows × (d +
    8) floats and an lse a row) in shared memory beyond the L2 kernel's."""
    from cuflash import TileConfig
    from cuflash.gpu import build, plan
    skip_without_nvrtc()
    for dt, stages, cache, c in (("float16", 3, "cache", 8), ("bfloat16", 2, "paged", 2)):
        t = TileConfig(16, 64, 4, stages, "mma")
        plain, = plan.specs_for(dt, 128, t, plan.Variant("causal", split=True, cache=cache), False)
        spec, = plan.specs_for(dt, 128, t, plan.Variant("causal", split=True, cache=cache,
                                                        cluster=c), False)
        plan.validate(spec, arch="sm_90")
        assert f"void __cluster_dims__({c}, 1, 1)" in build.source(spec)
        assert "void __cluster_dims__" not in build.source(plain)
        assert spec.smem_bytes() - plain.smem_bytes() >= 16 * (128 + 8) * 4 + 16 * 4
        reps = [build.compile_offline(build.source(s), s.name, "sm_90", s.smem_bytes())
                for s in (plain, spec)]
        assert all(r.spills == 0 for r in reps), [(r.name, r.spills) for r in reps]
        assert reps[1].registers <= reps[0].registers + 8, [(r.name, r.registers) for r in reps]


@pytest.mark.parametrize("page_size", [48, 32])
def test_kernel_path_refuses_pages_that_split_a_tile(page_size):
    """ops.forward_kvcache reads a page pool in place only when each key tile lies in one page:
    a page size that is no power of two, or smaller than the tile's block_n, is refused before
    anything launches (attention_with_kvcache gathers such pages instead)."""
    from cuflash import TileConfig
    from cuflash.gpu import ops
    q = np.zeros((1, 2, 1, 16), np.float16)
    pool = np.zeros((4, 2, page_size, 16), np.float16)
    rows = ops.CacheRows(np.zeros(1, np.int32), np.zeros((1, 4), np.int32), page_size)
    with pytest.raises(ValueError, match=rf"page_size={page_size}: .*block_n=64"):
        ops.forward_kvcache(q, pool, pool, None, rows, tile=TileConfig(16, 64, 1, 2, "mma"),
                            group=1)


def _gpu_or_skip():
    from cuflash._xp import gpu_available
    if not gpu_available():
        pytest.skip("no CUDA GPU visible to CuPy")
    import cupy as cp
    return cp


def _record_launches(monkeypatch) -> list:
    """The ops.ForwardLaunch of every KV-cache kernel launch prepared from now on (a prepared
    signature's calls reuse theirs: kvcache._PLANS)."""
    from cuflash.gpu import ops
    launches, real = [], ops.kvcache_launch
    monkeypatch.setattr(ops, "kvcache_launch",
                        lambda *a, **kw: launches.append(real(*a, **kw)) or launches[-1])
    return launches


@pytest.mark.gpu
@pytest.mark.parametrize("Hq,Tq", [(4, 1), (8, 1), (1, 1), (2, 3)],
                         ids=["gqa4", "gqa8", "mha", "mha-tq3"])
def test_lone_split_merge_stages_every_split_at_once(monkeypatch, Hq, Tq):
    """A step whose grid is at most one block an SM (one sequence, one kv head, 64 splits) launches
    with the shared memory in which its merge stages all 64 splits in one round
    (ops.merge_room_bytes, NOTES v104) where the kernel's layout holds less (four busy warps:
    the GQA folds of 4 and 8 heads), and matches the oracle; a batch of more blocks than SMs
    keeps the layout's."""
    cp = _gpu_or_skip()
    from cuflash.gpu import ops
    launches = _record_launches(monkeypatch)
    monkeypatch.setattr(kvcache, "_PLANS", {})
    dt = np.float16
    sc = Scenario(cp, dt, "contiguous", Hq=Hq, Hkv=1, Tq=Tq, Tnew=0, seqlens=(8192 - 5,),
                  d=128, seed=case_seed("lone-merge", Hq, Tq))
    out, lse = sc.call(return_lse=True, num_splits=64)
    (run,) = launches
    assert run.num_splits == 64 and run.cluster == 1, run.spec.name
    rows = Hq if Tq == 1 else Tq   # the tile's rows: the fold's heads (Tq = 1), else one head's
    want = ops.merge_room_bytes(64, rows, run.threads // 32, 4)
    assert run.smem == max(want, run.spec.smem_bytes()), (run.smem, want)
    if rows >= run.threads // 32:
        assert run.smem > run.spec.smem_bytes(), (run.smem, run.spec.name)
    sc.check(out, lse, f"Hq={Hq} Tq={Tq}", causal=True)
    launches.clear()
    many = Scenario(cp, dt, "contiguous", Hq=8 * Hq, Hkv=8, Tq=Tq, Tnew=0, seqlens=(2000,) * 32,
                    d=128, seed=case_seed("many-blocks", Hq, Tq))
    out, lse = many.call(return_lse=True, num_splits=16)   # no cluster: 2-8
    assert launches[0].smem == launches[0].spec.smem_bytes()
    many.check(out, lse, "many blocks", causal=True)


@pytest.mark.gpu
@pytest.mark.parametrize("layout,page_size", [("contiguous", PAGE), ("paged", 64)],
                         ids=["contiguous", "paged64"])
@pytest.mark.parametrize("validate", [True, False])
def test_prepared_call_is_reused_with_new_arrays(monkeypatch, layout, page_size, validate):
    """Calls of one signature share one prepared launch (kvcache._PLANS): the second call, on
    new arrays with other values and other lengths, must read its own arrays, not the first
    call's (each against the oracle), with and without validate; append included."""
    cp = _gpu_or_skip()
    calls = _record_launches(monkeypatch)
    monkeypatch.setattr(kvcache, "_PLANS", {})
    dtype = DTYPES["float16"]
    for seed, seqlens in ((1, (0, 1, 129, 64, 300)), (2, (300, 5, 0, 64, 128))):
        sc = Scenario(cp, dtype, layout, Hq=8, Hkv=2, Tq=1, Tnew=2, d=64, page_size=page_size,
                      seqlens=seqlens, seed=case_seed("prepared", layout, seed, validate))
        # both scenarios must have one signature: pad the second's cache to the first's shape
        if seed == 1:
            shapes = (sc.k_cache.shape, None if sc.block_table is None else sc.block_table.shape)
        else:
            sc.k_cache, sc.v_cache, sc.block_table = _reshape_like(cp, sc, shapes)
        out, lse = sc.call(return_lse=True, validate=validate)
        sc.check(out, lse, f"{layout} call {seed} validate={validate}", causal=True)
    assert len(calls) == 1, f"{len(calls)} launches prepared for one signature"


@pytest.mark.gpu
def test_prepared_call_from_threads_at_once(monkeypatch):
    """ForwardLaunch's per-call path writes each call's addresses into a parameter struct kept
    per thread: threads calling one prepared launch at the same time, each on its own arrays
    (one signature), must each get exactly what the same call gives alone, and the launch must
    hold one struct per thread."""
    import threading
    cp = _gpu_or_skip()
    monkeypatch.setattr(kvcache, "_PLANS", {})
    scs = [Scenario(cp, DTYPES["float16"], "contiguous", Hq=8, Hkv=2, Tq=1, Tnew=0, d=64,
                    seqlens=(200, 1, 77), seed=case_seed("threads", i)) for i in range(4)]
    alone = [sc.call(validate=False) for sc in scs]
    cp.cuda.Device().synchronize()
    (plan,) = [p for p in kvcache._PLANS.values() if p is not kvcache._NO_PLAN]
    got, structs, errors, start = {}, {}, [], threading.Barrier(len(scs))

    def work(i):   # a thread whose first CUDA call is the prepared launch
        try:
            start.wait()
            for _ in range(50):
                out = scs[i].call(validate=False)
            cp.cuda.get_current_stream().synchronize()
            got[i], structs[i] = out, plan.launch.local.held   # kept: ids stay distinct
        except Exception as exc:   # reported below, with the thread
            errors.append((i, exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(scs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, out in enumerate(alone):
        assert cp.array_equal(got[i], out), f"thread {i} got another call's answer"
    assert len({id(held[0]) for held in structs.values()}) == len(scs), \
        "threads shared a parameter struct"


def _reshape_like(cp, sc, shapes):
    """The scenario's cache (and block_table) grown to `shapes` (NaN / -1 in the new room)."""
    (cache_shape, table_shape) = shapes
    out = []
    for c in (sc.k_cache, sc.v_cache):
        assert all(a <= b for a, b in zip(c.shape, cache_shape)), (c.shape, cache_shape)
        big = cp.full(cache_shape, cp.nan, dtype=c.dtype)
        big[tuple(slice(0, n) for n in c.shape)] = c
        out.append(big)
    table = sc.block_table
    if table is not None:
        big = cp.full(table_shape, -1, dtype=cp.int32)
        big[:, :table.shape[1]] = table
        table = big
    return out[0], out[1], table


@pytest.mark.gpu
@pytest.mark.parametrize("layout,page_size", [("contiguous", PAGE), ("paged", 64)],
                         ids=["contiguous", "paged64"])
def test_validate_false_clamps_bad_indices(layout, page_size):
    """validate=False: cache lengths beyond the capacity or negative, and block_table entries
    outside the pool, are clamped by the kernels (append and attention): the call completes and
    the device is still healthy (compute-sanitizer runs this too: tests/sanitize.py), while
    validate=True refuses the same call and leaves the cache untouched."""
    cp = _gpu_or_skip()
    sc = Scenario(cp, DTYPES["float16"], layout, Hq=4, Hkv=2, Tq=1, Tnew=1, d=64,
                  page_size=page_size, seqlens=(5, 70), seed=case_seed("clamp", layout))
    bad_lens = cp.asarray(np.array([10 ** 6, -7], np.int32))
    table = sc.block_table
    if table is not None:
        table = table.copy()
        table[:, 0] = cp.asarray(np.array([10 ** 6, -3], np.int32))
    before = _bytes(sc.k_cache, sc.v_cache)
    with pytest.raises(ValueError, match="cache_seqlens"):
        attention_with_kvcache(sc.q, sc.k_cache, sc.v_cache, cache_seqlens=bad_lens,
                               block_table=table, k_new=sc.k_new, v_new=sc.v_new)
    assert _bytes(sc.k_cache, sc.v_cache) == before
    out = attention_with_kvcache(sc.q, sc.k_cache, sc.v_cache, cache_seqlens=bad_lens,
                                 block_table=table, k_new=sc.k_new, v_new=sc.v_new,
                                 validate=False)
    cp.cuda.Device().synchronize()   # raises if a kernel faulted
    assert out.shape == sc.q.shape


@pytest.mark.gpu
@pytest.mark.parametrize("layout,page_size", [("contiguous", PAGE), ("paged", 64)],
                         ids=["contiguous", "paged64"])
def test_cuda_graph_capture_replays_like_eager_calls(layout, page_size):
    """A decode step (append, then attend; validate=False) captured on a CuPy stream replays as
    the eager call: bit-equal outputs, and after new queries are written into q in place, the
    replay's outputs equal an eager call on them (the graph reads q where it lies)."""
    cp = _gpu_or_skip()
    sc = Scenario(cp, DTYPES["float16"], layout, Hq=8, Hkv=2, Tq=1, Tnew=1, d=64,
                  page_size=page_size, seqlens=(3, 200, 64), seed=case_seed("graph", layout))
    kw = dict(sc.kwargs(), validate=False, return_lse=True)
    cp.cuda.Device().synchronize()   # the scenario's arrays, made on the default stream, ready
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        eager_out, eager_lse = attention_with_kvcache(sc.q, sc.k_cache, sc.v_cache, **kw)
        stream.begin_capture()
        out, lse = attention_with_kvcache(sc.q, sc.k_cache, sc.v_cache, **kw)
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
        assert cp.array_equal(out, eager_out) and cp.array_equal(lse, eager_lse)
        sc.check(out, lse, f"graph {layout}", causal=True)
        sc.q[...] = cp.asarray(np.random.default_rng(5).standard_normal(sc.q.shape),
                               dtype=sc.q.dtype)
        graph.launch(stream)
        again_out, again_lse = attention_with_kvcache(sc.q, sc.k_cache, sc.v_cache, **kw)
        stream.synchronize()
        assert cp.array_equal(out, again_out) and cp.array_equal(lse, again_lse)
        assert not cp.array_equal(out, eager_out)


@pytest.mark.gpu
@pytest.mark.parametrize("layout,page_size", [("contiguous", PAGE), ("paged", 256)],
                         ids=["contiguous", "paged256"])
def test_long_caches_in_kernel(layout, page_size):
    """Caches of 100,000 and 33,333 tokens beside one of 1 (d = 128, GQA 4): split-KV over
    hundreds of key tiles per sequence and the merge of many splits, against the oracle."""
    cp = _gpu_or_skip()
    sc = Scenario(cp, DTYPES["float16"], layout, Hq=8, Hkv=2, Tq=1, Tnew=1, d=128,
                  page_size=page_size, seqlens=(100000, 33333, 1),
                  seed=case_seed("long", layout))
    out, lse = sc.call(return_lse=True, validate=False)
    sc.check(out, lse, f"long {layout}", causal=True)


def test_byte_helpers_refuse_what_they_would_miscount():
    """Found by fuzzing: gqa_aware='False' counted as True, dtype=None as float64, int8 taken,
    and lengths 2.7 / 10.9 cut to 2 / 10."""
    from cuflash.kvcache import cache_waste, decode_step_bytes, kv_cache_bytes
    kw = dict(q_heads=4, kv_heads=2, head_dim=16)
    with pytest.raises(TypeError, match=r"gqa_aware must be a bool, got 'False'"):
        decode_step_bytes([10], gqa_aware="False", **kw)
    for dtype in (None, np.int8, "int8"):
        with pytest.raises((ValueError, TypeError), match=r"dtype"):
            kv_cache_bytes(10, kv_heads=2, head_dim=16, dtype=dtype)
    with pytest.raises(ValueError, match=r"lengths must be whole numbers of tokens, got \[2.7\]"):
        cache_waste([2.7], page_size=16)
    with pytest.raises(ValueError, match=r"lengths must be whole numbers"):
        decode_step_bytes([10.9], **kw)
    with pytest.raises(ValueError, match=r"lengths must be >= 0, got -1"):
        cache_waste([3, -1], page_size=4)
    # whole numbers as floats, and the counts themselves, unchanged
    assert cache_waste([3.0, 5], page_size=4) == cache_waste([3, 5], page_size=4)
    assert decode_step_bytes([10], gqa_aware=False, **kw) == 3092
    assert kv_cache_bytes(10, kv_heads=2, head_dim=16, dtype="bfloat16") == 1280


def test_decode_tile_rule():
    """kvcache._tile_for's 16-bit tiles: up to 16 query rows, 4 warps of 16 keys each that split
    a tile of 64 keys, each staging its own keys, so that pages of 16 and 32 keep the tile (its
    page_rows is 16); more rows, two warps of 16 rows over every key of a tile: 64 (a page's 16
    or 32 when pages hold fewer), or 32 above DECODE_WIDE_D (where each warp's 16 x 64 scores
    beside O's 256 columns spill: the compile gate's decode kernels,
    cuflash.gpu.precompile.decode_specs)."""
    from cuflash import TileConfig
    from cuflash.gpu import plan
    skip_without_nvrtc()   # the tile check reads the kernel's shared memory

    def tile(d, rows, page, stages=2, arch="sm_90", limit=232448):
        return kvcache._tile_for("float16", d, rows, None, page, arch, limit, stages)

    assert tile(128, 1, 0) == TileConfig(16, 64, 4, 2, "mma")
    assert tile(128, 16, 256) == TileConfig(16, 64, 4, 2, "mma")
    assert tile(128, 16, 32) == TileConfig(16, 64, 4, 2, "mma")   # each warp's 16 keys in a page
    assert tile(64, 4, 16, 3) == TileConfig(16, 64, 4, 3, "mma")
    assert tile(128, 17, 0) == TileConfig(32, 64, 2, 2, "mma")
    assert tile(kvcache.DECODE_WIDE_D, 32, 0) == TileConfig(32, 64, 2, 2, "mma")
    assert tile(kvcache.DECODE_WIDE_D + 1, 32, 0) == TileConfig(32, 32, 2, 2, "mma")
    assert tile(256, 32, 0, 3, "sm_80", 166912) == TileConfig(32, 32, 2, 3, "mma")
    assert tile(256, 32, 16) == TileConfig(32, 16, 2, 2, "mma")
    assert tile(256, 1, 32) == TileConfig(16, 64, 4, 2, "mma")
    assert plan.page_rows(tile(128, 1, 16)) == 16 and plan.page_rows(tile(128, 32, 16)) == 16


def test_cluster_spec_needs_room_for_the_partials():
    """plan.cluster_spec takes a cluster only where split_cluster offers one and the kernel
    with the cluster's partials in shared memory fits the device: a 32-row tile at head dim 256
    with 64 keys and 3 stages fits sm_90 alone (213008 bytes) but not with its partials, so its
    splits merge through L2 (ops.ForwardLaunch, the compile gate's decode set)."""
    from cuflash import TileConfig
    from cuflash.gpu import plan
    skip_without_nvrtc()
    v = plan.Variant("causal", split=True, cache="cache")
    wide, = plan.specs_for("float16", 256, TileConfig(32, 64, 2, 3, "mma"), v, False)
    narrow, = plan.specs_for("float16", 128, TileConfig(32, 64, 2, 3, "mma"), v, False)
    assert wide.smem_bytes() <= 232448
    assert plan.cluster_spec(wide, 8, "sm_90", 8, 232448) is wide
    got = plan.cluster_spec(narrow, 8, "sm_90", 8, 232448)
    assert got.variant.cluster == 8 and got.name.endswith("_split_c8_kvcache")
    assert plan.cluster_spec(narrow, 8, "sm_90", 8, got.smem_bytes()) == got
    assert plan.cluster_spec(narrow, 8, "sm_90", 8, got.smem_bytes() - 1) is narrow
    assert plan.cluster_spec(narrow, 8, "sm_90", 4, 232448) is narrow   # 8 splits, clusters <= 4
    assert plan.cluster_spec(narrow, 4, "sm_90", 8, 232448).variant.cluster == 4
    assert plan.cluster_spec(narrow, 8, "sm_80", 8, 232448) is narrow


def test_decode_tile_keys_lie_in_whole_pages():
    """kvcache._tile_for gives None where a tile's copies would cross a page of a paged cache
    (page_size % block_n: PagedRows reads each copy from one page), so the call takes the
    reference path: float32's and float64's 64-key tiles over pages of 16 or 32, a forced
    64-key tile of two row warps over pages of 32; the same tiles over pages of 64 or 128, or a
    contiguous cache."""
    from cuflash import TileConfig
    skip_without_nvrtc()   # the tile check reads the kernel's shared memory

    def tile(dtype, d, page, forced=None):
        return kvcache._tile_for(dtype, d, 1, forced, page, "sm_90", 232448, 2)

    for dtype in ("float32", "float64"):
        whole = tile(dtype, 64, 0)
        assert whole is not None and whole.block_n == 64
        assert tile(dtype, 64, 64) == whole and tile(dtype, 64, 128) == whole
        assert tile(dtype, 64, 16) is None and tile(dtype, 64, 32) is None
    rows_split = TileConfig(32, 64, 2, 2, "mma")
    assert tile("float16", 128, 32, rows_split) is None
    assert tile("float16", 128, 128, rows_split) == rows_split
    assert tile("float16", 128, 0, rows_split) == rows_split


@pytest.mark.gpu
@pytest.mark.parametrize("layout,page_size", [("contiguous", PAGE), ("paged", 32)],
                         ids=["contiguous", "paged32"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_wide_head_decode(monkeypatch, dtype, layout, page_size):
    """Head dim 256 over the decode kernels against the oracle: 32 query rows a kv head (the GQA
    fold of 32 heads: the 32-key tile of DECODE_WIDE_D) and one head per row, also over pages of
    32 (four warps of 16 keys, each warp's keys in one page: NOTES v101); automatic splits and 8
    given (one cluster on sm_90). Then a forced
    32 x 64 tile of 3 stages, whose cluster would not fit in shared memory: its 8 splits merge
    through L2 (plan.cluster_spec), where the launch used to be refused."""
    cp = _gpu_or_skip()
    from cuflash import TileConfig
    from cuflash.gpu import ops, plan
    dt = DTYPES[dtype]
    if dt is None:
        pytest.skip("ml_dtypes not installed (no bfloat16)")
    launches = _record_launches(monkeypatch)
    hopper = plan._sm(ops.device_arch()) >= 90
    cases = [("gqa32-fold", 32, 1, 1, (32, 32)),
             ("mha-tq2", 2, 2, 2, (16, 64))]
    for name, Hq, Hkv, Tq, want in cases:
        sc = Scenario(cp, dt, layout, Hq=Hq, Hkv=Hkv, Tq=Tq, Tnew=0, d=256,
                      page_size=page_size, seqlens=(0, 1, 700, 33, 1500),
                      seed=case_seed("wide-decode", name, layout, dtype))
        for splits in (None, 8):
            monkeypatch.setattr(kvcache, "_PLANS", {})
            launches.clear()
            out, lse = sc.call(return_lse=True, num_splits=splits, validate=splits is None)
            where = f"{layout} {name} splits={splits}"
            t = launches[0].spec.tile
            assert (t.block_m, t.block_n) == want, f"{where}: {t}"
            assert t.block_n // t.num_warps == 16 or t.block_m == 32, f"{where}: {t}"
            if splits == 8:
                assert launches[0].cluster == (8 if hopper else 1), where
            sc.check(out, lse, where, causal=True)
    if layout == "contiguous" and hopper:
        monkeypatch.setattr(kvcache, "DECODE_TILE", TileConfig(32, 64, 2, 3, "mma"))
        monkeypatch.setattr(kvcache, "_PLANS", {})
        launches.clear()
        sc = Scenario(cp, dt, layout, Hq=32, Hkv=1, Tq=1, Tnew=0, d=256, page_size=page_size,
                      seqlens=(0, 1, 2000, 77), seed=case_seed("wide-decode-l2", dtype))
        out, lse = sc.call(return_lse=True, num_splits=8, validate=False)
        assert launches[0].cluster == 1 and launches[0].num_splits == 8
        sc.check(out, lse, "forced 32x64x2x3, 8 splits", causal=True)
