"""Issue 14's experiments (``cuflash.experiments.decode``, ``readbw``): KV-cache sweeps (``cache``,
``page_size``, ``cache_lengths``, the method ``read_ceiling``). The shipped files validate with
the point counts their comments give; schema errors name the key, and a typo stops a run before
anything is measured; the bytes each point allocates are counted exactly (and equal
``kv_cache_bytes`` where they must); paged waste is below contiguous waste for a mixed batch;
flash (the twin), naive and the oracle agree over the same cache; the read pass reads every word;
the CPU twin runs end to end (CSV, plots, report, resume) and its rows pass a column check
written from the row alone, which planted mistakes fail. GPU-only cases carry ``gpu``."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import yaml

from cuflash import cli
from cuflash._xp import gpu_available
from cuflash.experiments import decode, measure, readbw, report, results, runner, schema
from cuflash.experiments.points import Point, enumerate_points, point_of_row
from cuflash.kvcache import attention_with_kvcache, cache_waste, kv_cache_bytes

from test_experiments import REPO, assert_host_bound, assert_schema_error, write

KV = {"device": "cpu",
      "axes": {"kv_len": [32, 48], "seq_len": [1, 3], "head_dim": 16, "batch": 3, "heads": 4,
               "group": [1, 2, "heads"], "dtype": "float32", "causal": True,
               "cache": ["contiguous", "paged"], "page_size": [16, 32],
               "cache_lengths": [None, {"fractions": [1, 0.5, "0.1x2"]}]},
      "methods": ["twin", "naive", "read_ceiling"],
      "measure": {"repeats": 1, "warmup": 0, "max_seconds": 0.02, "stable_spread": 0.5}}


def _quiet(*_):
    pass


def _with(base, **axes):
    return dict(base, axes=dict(base["axes"], **axes))


def _dry_run(name, capsys) -> int:
    assert cli.main(["run", str(REPO / "experiments" / f"{name}.yaml"), "--dry-run"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"{name}: ") and " points on " in first, first
    return int(first.split()[1])


# -- the shipped files ----------------------------------------------------------------------------

def test_shipped_kv_cache_experiments_validate_with_their_point_counts(capsys):
    counts = {n: _dry_run(n, capsys) for n in ("kv_cache", "cpu_kv_cache")}
    assert counts == {"kv_cache": 258, "cpu_kv_cache": 108}               # as commented
    for name, count in counts.items():
        text = (REPO / "experiments" / f"{name}.yaml").read_text()
        assert f"= {count}" in text, name
    exp = schema.load(REPO / "experiments" / "kv_cache.yaml", smem_limit=schema.DEFAULT_SMEM_LIMIT)
    pts = enumerate_points(exp, "gpu", smem_limit=schema.DEFAULT_SMEM_LIMIT)
    assert {p.heads for p in pts} == {32} and {p.head_dim for p in pts} == {128}
    assert {p.dtype for p in pts} == {"float16"} and all(p.causal for p in pts)
    assert {p.method for p in pts} == {"flash", "naive", "read_ceiling"}
    assert all(p.fwd_tile is None and p.bwd_tile is None for p in pts)   # kvcache picks them
    by = {s: [p for p in pts if p.sweep == s] for s in ("bytes", "waste", "decode", "tq")}
    assert {p.kv_heads for p in by["bytes"]} == {32, 8, 1}                # MHA, GQA, MQA
    assert {p.kv_len for p in by["decode"]} == {1024, 4096, 16384, 65536, 131072}
    assert {p.batch * p.kv_heads for p in by["decode"]} == {8, 64, 512}
    assert {p.page_size for p in by["waste"]} == {None, 16, 64, 256, 1024}
    assert {p.seq_len for p in by["tq"]} == {1, 2, 4, 8}
    mixed = by["waste"][0]
    L = decode.lengths(mixed)
    assert len(L) == 16 and max(L) == mixed.kv_len and L[-1] == math.ceil(0.02 * mixed.kv_len)
    assert {(p.cache, p.page_size) for p in pts} >= {("contiguous", None), ("paged", 256)}
    assert schema.load(REPO / "experiments" / "cpu_kv_cache.yaml").device == "cpu"


# -- schema ---------------------------------------------------------------------------------------

NO_CACHE = {"device": "cpu", "axes": {"seq_len": 16, "head_dim": 16, "heads": 2},
            "methods": ["twin"]}

BAD = [
    (_with(KV, cache=["contiguous", "pagd"]), "axes.cache[1]", "'paged'"),
    (_with(KV, page_size=[16, 24]), "axes.page_size[1]", "power of two"),
    (_with(KV, page_size=8), "axes.page_size", ">= 16"),
    (_with(KV, page_size=[16.0]), "axes.page_size[0]", "expected an integer"),
    (_with(KV, cache="contiguous"), "axes.page_size", "add paged"),
    (_with(NO_CACHE, page_size=16), "axes.page_size", "add cache"),
    (_with(NO_CACHE, cache_lengths=None), "axes.cache_lengths", "add cache"),
    (_with(KV, cache_lengths=[0.5]), "axes.cache_lengths[0]", "{fractions: [...]}"),
    (_with(KV, cache_lengths={"fractions": [0.5, 1]}), "axes.cache_lengths.fractions[0]",
     "it must be 1"),
    (_with(KV, cache_lengths={"fractions": [1, 1.5]}), "axes.cache_lengths.fractions[1]",
     "in (0, 1]"),
    (_with(KV, cache_lengths={"fractions": [1, 0]}), "axes.cache_lengths.fractions[1]",
     "in (0, 1]"),
    (_with(KV, cache_lengths={"fractions": [1, "0.5x100000000000"]}),
     "axes.cache_lengths.fractions[1]", "a mix holds at most 1048576"),   # (was a MemoryError)
    (_with(KV, cache_lengths={"fractions": [1, "0.1y2"]}), "axes.cache_lengths.fractions[1]",
     "'FxN'"),
    (_with(KV, cache_lengths={"fractions": [1, "1/0"]}), "axes.cache_lengths.fractions[1]",
     "divides by zero"),
    (_with(KV, cache_lengths={"fraction": [1]}), "axes.cache_lengths.fraction", "valid keys"),
    (_with(KV, cache_lengths={}), "axes.cache_lengths", "needs 'fractions'"),
    (_with(KV, **{"pass": ["forward", "backward"]}), "axes.pass", "forward pass"),
    (dict(KV, axes={k: v for k, v in KV["axes"].items() if k != "kv_len"}), "axes.kv_len",
     "context lengths S as ints"),
    (_with(KV, kv_len=["seq_len"]), "axes.kv_len", "context lengths S as ints"),
    (_with(KV, seq_len=8, cache_lengths={"fractions": [1, 0.05]}), "axes.cache_lengths",
     "fewer than the seq_len = Tq = 8"),
    (_with(KV, seq_len=64, cache_lengths=None), "axes.kv_len", "fewer than the seq_len"),
    (_with(KV, window=[[8, 0]]), "axes.window", "not wired into KV-cache sweeps"),
    (_with(KV, varlen={"lengths": [8]}), "axes.varlen", "not wired into KV-cache sweeps"),
    (_with(KV, batch={"tokens": 64}), "axes.batch", "give the batch sizes as ints"),
    (dict(NO_CACHE, methods=["twin", "read_ceiling"]), "methods[1].name",
     "needs a sweep with cache"),
    (dict(KV, methods=[{"name": "torch_sdpa", "backends": ["flash"]}]), "methods[0].name",
     "no KV-cache step"),
    (dict(KV, methods=[{"name": "twin", "grid": {"block_m": 16}}]), "methods[0].grid",
     "picks its own tiles"),
    (dict(KV, methods=[{"name": "twin", "layout": "materialized"}]), "methods[0].layout",
     "no 'cache'"),
    (dict(KV, methods=[{"name": "read_ceiling", "grid": {"block_m": 16}}]), "methods[0].grid",
     "valid keys"),
    (dict(NO_CACHE, plots=[{"x": "seq_len", "y": "cache_bytes"}]), "plots[0].y",
     "not a column these measurements produce"),
    (dict(KV, plots=[{"x": "kv_len", "y": "cache_byte"}]), "plots[0].y", "'cache_bytes'"),
]


@pytest.mark.parametrize("data, path, hint", BAD, ids=[b[1] + ":" + b[2][:14] for b in BAD])
def test_schema_error_names_the_key_and_the_value(tmp_path, data, path, hint):
    assert_schema_error(tmp_path, data, path, hint)


TYPOS = [("cache: [contiguous, paged]", "cache: [contiguous, pagged]", "axes[0].cache[1]"),
         ("page_size: [16, 32, 64]", "page_size: [16, 32, 48]", "axes[1].page_size[2]"),
         ("0.05x2", "0.05y2", "axes[1].cache_lengths.fractions[4]"),
         ("  - read_ceiling", "  - read_celing", "methods[2].name"),
         ("y: cache_waste", "y: cache_wastes", "plots[2].y")]


@pytest.mark.parametrize("old, new, path", TYPOS, ids=[t[2] for t in TYPOS])
def test_a_typo_in_the_shipped_file_stops_before_measuring(tmp_path, monkeypatch, capsys, old,
                                                           new, path):
    made = []
    monkeypatch.setattr(decode, "make_inputs", lambda *a, **k: made.append(a))
    text = (REPO / "experiments" / "cpu_kv_cache.yaml").read_text()
    assert old in text
    f = write(tmp_path, text.replace(old, new, 1), "typo.yaml")
    out = tmp_path / "out"
    assert cli.main(["run", str(f), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "typo.yaml" in err and f": {path}: " in err, err
    assert made == [] and not out.exists()


def test_mixes_parse_and_lengths_round_up():
    exp = schema.build(KV)
    assert exp.axes.cache_lengths == (None, "1,0.5,0.1x2")
    assert exp.axes.caches() == (("contiguous", None), ("paged", 16), ("paged", 32))
    assert schema.build(NO_CACHE).axes.caches() == ((None, None),)
    assert decode.mix_text(decode.expand([1, "0.25x3", "1/3", 0.001])) == "1,0.25x3,1/3,0.001"
    assert decode.parse_mix("1,0.25x3,1/3") == (1, Fraction(1, 4), Fraction(1, 4),
                                                 Fraction(1, 4), Fraction(1, 3))
    assert decode.sequence_lengths(64, 5, "1,0.1,1/3") == (64, 7, 22, 64, 7)   # ceil, cycled
    assert decode.sequence_lengths(100, 2, None) == (100, 100)
    assert decode.sequence_lengths(4096, 1, "1,0.3") == (4096,)
    assert decode.sequence_lengths(10, 2, "1,0.3") == (10, 3)          # 0.3 exactly, not 3.0000x


def test_points_round_trip_through_json_and_rows():
    pts = enumerate_points(schema.build(KV))
    # 2 S x 2 Tq x 3 G x 3 caches x 2 mixes x 3 methods
    assert len(pts) == 2 * 2 * 3 * 3 * 2 * 3 and len({p.key() for p in pts}) == len(pts)
    for p in pts:
        assert Point.from_json(p.to_json()) == p
        row = {k: results.cell_text(v) for k, v in p.columns().items()}
        q = point_of_row(row)
        assert (q.cache, q.page_size, q.cache_lengths, q.run_shape) == (
            p.cache, p.page_size, p.cache_lengths, p.run_shape)
        assert results.row_key(row) == p.key()
        assert ("paged cache (pages of" in p.describe()) == (p.cache == "paged")
    old = {k: v for k, v in pts[0].columns().items() if k not in decode.AXIS_COLUMNS}
    assert point_of_row({k: results.cell_text(v) for k, v in old.items()}).cache is None


# -- the bytes, counted by hand -------------------------------------------------------------------

def _hand_lengths(S, B, mix):
    """Sequence lengths written out independently of decode: ceil(f·S), fractions in turn."""
    if not mix:
        return [S] * B
    fr = []
    for item in mix.split(","):
        f, _, n = item.partition("x")
        fr += [Fraction(f)] * int(n or 1)
    return [-(-(fr[b % len(fr)].numerator * S) // fr[b % len(fr)].denominator)
            for b in range(B)]


@pytest.mark.parametrize("cache, P", [("contiguous", None), ("paged", 16), ("paged", 32)])
def test_allocation_is_counted_exactly(cache, P):
    for p in enumerate_points(schema.build(KV)):
        if p.cache != cache or p.page_size != P or p.method != "twin":
            continue
        inputs = measure.make_inputs(p, 0)
        alloc = inputs.allocation
        L = _hand_lengths(p.kv_len, p.batch, p.cache_lengths)
        Hkv, d, e = p.heads // p.group, p.head_dim, 4
        assert decode.lengths(p) == tuple(L)
        assert alloc.cache_tokens == sum(L)
        if cache == "contiguous":
            assert alloc.cache_slots == p.batch * max(L) and alloc.cache_pages is None
            assert inputs["k_cache"].shape == (p.batch, Hkv, max(L), d)
        else:
            pages = sum(-(-n // P) for n in L)
            assert alloc.cache_pages == pages and alloc.cache_slots == pages * P
            assert inputs["k_cache"].shape == (pages, Hkv, P, d)          # no page left over
            assert inputs["block_table"].dtype == np.int32
        assert alloc.cache_bytes == 2 * alloc.cache_slots * Hkv * d * e
        assert alloc.cache_waste == 1 - sum(L) / alloc.cache_slots
        held = decode.held_bytes(p)
        assert held["pred_cache_bytes"] == alloc.cache_bytes
        assert held["pred_cache_waste"] == pytest.approx(alloc.cache_waste, abs=1e-15)
        assert held["kv_bytes"] == kv_cache_bytes(sum(L), kv_heads=Hkv, head_dim=d,
                                                  dtype="float32")
        uniform = p.cache_lengths is None and (cache == "contiguous" or p.kv_len % P == 0)
        if uniform:       # nothing padded: the arrays hold exactly kv_cache_bytes
            assert alloc.cache_bytes == kv_cache_bytes(p.kv_len, kv_heads=Hkv, head_dim=d,
                                                       dtype="float32", batch=p.batch)
        else:
            assert alloc.cache_bytes > held["kv_bytes"]
        assert list(inputs.seqlens) == [n - p.seq_len for n in L]


def test_pages_needed_counts_what_the_pool_hands_out():
    assert decode.pages_needed([1, 16, 17, 33, 0], 16) == 1 + 1 + 2 + 3 + 0
    assert decode.pages_needed([256] * 4, 256) == 4
    assert decode.pages_needed([], 16) == 0
    L = [4096, 3072, 2048, 1229, 820, 410, 205] + [82] * 9     # the GPU file's mix at S = 4096
    for P in (16, 64, 256, 1024):
        assert decode.pages_needed(L, P) == cache_waste(L, page_size=P).pages


def test_paged_waste_is_below_contiguous_waste_for_a_mixed_batch():
    """Paged wastes less than one page per sequence; contiguous pads every sequence to the
    longest. For 16 sequences of the GPU file's mix both are counted from the arrays made."""
    exp = schema.build(_with(KV, kv_len=[512], seq_len=1, batch=16, group=4, page_size=[16, 64],
                             cache_lengths={"fractions": [1, 0.75, 0.5, 0.3, 0.2, 0.1, 0.05,
                                                          "0.02x9"]}))
    waste = {}
    for p in enumerate_points(exp):
        if p.method == "twin" and p.cache_lengths:
            alloc = measure.make_inputs(p, 0).allocation
            waste[p.page_size] = alloc.cache_waste
            L = decode.lengths(p)
            assert alloc.cache_slots - alloc.cache_tokens < (p.page_size or max(L)) * len(L)
    tokens = 512 + 384 + 256 + 154 + 103 + 52 + 26 + 9 * 11
    assert waste[None] == pytest.approx(1 - tokens / (16 * 512), abs=1e-12)
    assert waste[16] < waste[64] < waste[None]
    assert waste[16] < 0.25 * waste[None]


# -- the calls ------------------------------------------------------------------------------------

def test_every_method_runs_the_same_step_as_the_oracle():
    """twin (attention_with_kvcache) and naive agree with the float64 oracle and with each
    other at every point: contiguous and paged, MHA/GQA/MQA, Tq 1 and 3, mixed lengths."""
    exp = schema.build(KV)
    outs = {}
    for p in enumerate_points(exp):
        if p.method == "read_ceiling":
            continue
        inputs = measure.make_inputs(p, 0)
        call = measure.build_call(p, inputs)
        got = call.outputs(call.fn())
        assert len(got) == 1 and got[0].shape == (p.batch, p.heads, p.seq_len, p.head_dim)
        assert measure.oracle_error(p, inputs, got) < 1e-5, p.describe()
        outs.setdefault(p.key()[1:], []).append(got[0])     # every method's out at the point
    for pair in outs.values():
        assert len(pair) == 2
        np.testing.assert_allclose(pair[0], pair[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cache", ["contiguous", "paged"])
def test_naive_step_stores_the_new_tokens_where_the_kernel_would(cache):
    p = next(p for p in enumerate_points(schema.build(_with(KV, seq_len=3)))
             if p.method == "naive" and p.cache == cache and p.cache_lengths and p.group == 2)
    a = measure.make_inputs(p, 1)
    b = measure.make_inputs(p, 1)
    decode.naive_step(a["q"], a["k_cache"], a["v_cache"], a["k_new"], a["v_new"], a.seqlens,
                      a.table, causal=True)
    attention_with_kvcache(b["q"], b["k_cache"], b["v_cache"], cache_seqlens=b["cache_seqlens"],
                           block_table=b.get("block_table"), k_new=b["k_new"], v_new=b["v_new"])
    np.testing.assert_array_equal(a["k_cache"], b["k_cache"])      # the same slots written
    np.testing.assert_array_equal(a["v_cache"], b["v_cache"])
    before = measure.make_inputs(p, 1)
    assert not np.array_equal(a["k_cache"], before["k_cache"])     # and something was written


def test_read_pass_reads_every_word():
    x = readbw.make_array(4096, np, seed=3)
    assert x.dtype == np.uint32 and x.nbytes == 4096
    want = 0
    for w in x.tolist():
        want ^= w
    assert readbw.host_xor(x) == readbw.read_xor(x) == want
    y = x.copy()
    y[-1] ^= 1                                      # one bit of the last word
    assert readbw.host_xor(y) != want
    assert readbw.host_xor(x[:-4]) != want          # a pass that stops early answers otherwise
    with pytest.raises(ValueError, match="multiple of 16"):
        readbw.make_array(100)
    with pytest.raises(ValueError, match="multiple of 16"):
        readbw.host_xor(x[:-1])
    with pytest.raises(TypeError, match="uint32"):
        readbw.host_xor(x.view(np.float32))
    assert readbw.grid_size(16, 132) == 1
    assert readbw.grid_size(16 * 256 * 5, 132) == 5
    assert readbw.grid_size(1 << 34, 132) == 8 * 132


def test_read_kernel_compiles_with_nvrtc():
    """The CUDA source compiles for sm_80 and sm_90 without a GPU, without spills."""
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from cuflash.gpu.build import compile_offline
    for arch in ("sm_80", "sm_90"):
        try:
            rep = compile_offline(readbw.KERNEL_SOURCE, readbw.KERNEL, arch)
        except OSError as exc:                      # no NVRTC library on this machine
            pytest.skip(f"NVRTC unavailable: {exc}")
        assert rep.spills == 0 and rep.registers is not None and rep.registers <= 64, rep


def test_predicted_bytes_and_flops_by_hand():
    """B = 3, Hq = 4, Hkv = 2, d = 16, float32, Tq = 3, causal, lengths 48, 24, 5."""
    exp = _with(KV, kv_len=48, seq_len=3, group=2, cache_lengths={"fractions": [1, 0.5, "0.1x2"]})
    for p in enumerate_points(schema.build(exp)):
        L = [48, 24, 5]
        assert decode.lengths(p) == tuple(L)
        t = runner.predicted(p)
        if p.method == "read_ceiling":
            assert (t.bytes_read, t.bytes_written, t.flops) == (2 * sum(L) * 2 * 16 * 4, 0, 0)
            continue
        kv = 2 * sum(L) * 2 * 16 * 4
        q_out = 2 * 3 * 4 * 3 * 16 * 4
        lse = 3 * 4 * 3 * 4
        new = 2 * 2 * 3 * 2 * 3 * 16 * 4
        index = 4 * 3 + (4 * sum(-(-n // p.page_size) for n in L) if p.cache == "paged" else 0)
        assert t.bytes_total == kv + q_out + lse + new + index
        assert t.bytes_written == q_out // 2 + lse + new // 2
        assert t.flops == 4 * 4 * 16 * sum(3 * n - 3 for n in L)     # Tq·L - Tq(Tq-1)/2 pairs


def test_needed_bytes_bounds_the_measured_peak():
    exp = _with(KV, kv_len=[256], seq_len=[1, 4], head_dim=64, batch=4)
    for p in enumerate_points(schema.build(exp))[::2]:
        if p.method == "read_ceiling":
            assert decode.needed_bytes(p) >= decode.token_bytes(p)
            continue
        assert_host_bound(p, 2 ** 24)


# -- end to end, and the column check -------------------------------------------------------------

def check_columns(rows: list[dict]) -> None:
    """Every KV-cache column of result rows against formulas written from the row alone:
    the lengths (ceil of each fraction of S, in turn), the slots (B·max L contiguous, whole
    pages paged), the bytes (2·slots·Hkv·d·itemsize allocated, 2·tokens·Hkv·d·itemsize of the
    tokens), the step's bytes (decode_step_bytes written out) and FLOPs, and gbps."""
    for r in rows:
        B, Hq, d, S, Tq = r["batch"], r["heads"], r["head_dim"], r["kv_len"], r["seq_len"]
        e = {"float32": 4, "float16": 2, "float64": 8}[r["dtype"]]
        Hkv = Hq // r["group"]
        assert r["kv_heads"] == Hkv
        L = _hand_lengths(S, B, r.get("cache_lengths"))
        tokens = sum(L)
        if r["cache"] == "paged":
            P = r["page_size"]
            pages = sum(-(-n // P) for n in L)
            slots = pages * P
        else:
            assert r["page_size"] is None
            pages, slots = None, B * max(L)
        assert r["kv_bytes"] == 2 * tokens * Hkv * d * e, r
        assert r["qkv_bytes"] == r["kv_bytes"] + B * Hq * Tq * d * e, r
        assert r["pred_cache_bytes"] == 2 * slots * Hkv * d * e, r
        assert r["pred_cache_waste"] == pytest.approx(1 - tokens / slots, abs=2e-6), r
        if r["method_name"] == "read_ceiling":
            assert r["cache_bytes"] is None and r["cache_tokens"] is None, r
            assert r["pred_bytes"] == r["kv_bytes"] and r["flops"] == 0, r
        else:
            assert r["cache_bytes"] == 2 * slots * Hkv * d * e, r
            assert (r["cache_tokens"], r["cache_slots"], r["cache_pages"]) == (
                tokens, slots, pages), r
            assert r["cache_waste"] == pytest.approx(1 - tokens / slots, abs=2e-6), r
            if not r.get("cache_lengths") and (pages is None or S % r["page_size"] == 0):
                assert r["cache_bytes"] == r["kv_bytes"], r       # nothing padded
            acc = 8 if e == 8 else 4
            want = (2 * tokens * Hkv * d * e + 2 * B * Hq * Tq * d * e + B * Hq * Tq * acc
                    + 4 * B * Hkv * Tq * d * e + 4 * B + (4 * pages if pages else 0))
            assert r["pred_bytes"] == want, r
            pairs = sum(Tq * n - (Tq * (Tq - 1) // 2 if r["causal"] else 0) for n in L)
            assert r["flops"] == 4 * Hq * d * pairs, r
        if r.get("time_ms_median"):
            assert r["gbps"] == pytest.approx(r["pred_bytes"] / r["time_ms_median"] / 1e6,
                                              rel=1e-4), r


def test_cpu_twin_end_to_end(tmp_path, capsys):
    out = tmp_path / "kv"
    assert cli.main(["run", "cpu_kv_cache", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    header = (out / "results.csv").read_text().splitlines()[0].split(",")
    for col in decode.AXIS_COLUMNS + schema.CACHE_COLUMNS + (
            "kv_bytes", "qkv_bytes", "pred_bytes", "gbps", "time_ms_median", "peak_mem_bytes",
            "error_rel", "sweep"):
        assert col in header, col
    rows = results.read_rows(out / "results.csv")
    assert len(rows) == 108 and {r["status"] for r in rows} == {"ok"}
    assert {r["method"] for r in rows} == {"twin", "naive", "read_ceiling"}
    assert {r["sweep"] for r in rows} == {"bytes", "waste", "decode"}
    check_columns(rows)
    for r in rows:
        assert r["time_ms_median"] > 0 and r["gbps"] > 0 and r["peak_mem_bytes"] >= 0
        assert (r["error_rel"] is None) == (r["method"] == "read_ceiling")
        assert r["error_rel"] is None or r["error_rel"] < 1e-5
    # flash vs naive: the same cache at every point
    at = {}
    for r in rows:
        if r["method"] != "read_ceiling":
            key = tuple(r[c] for c in ("sweep", "kv_len", "seq_len", "batch", "group", "cache",
                                       "page_size", "cache_lengths"))
            at.setdefault(key, set()).add(r["cache_bytes"])
    assert len(at) == 36 and all(len(v) == 1 for v in at.values())
    # the bytes and decode sweeps share 4 configurations (B = 1, Tq = 1, Hkv = 2): one table row
    points = len({k[1:] for k in at})
    assert points == 32
    # a mixed batch wastes less paged, at every page size and S
    waste = {(r["kv_len"], r["page_size"]): r["cache_waste"] for r in rows
             if r["sweep"] == "waste" and r["method"] == "twin"}
    for S in (128, 256):
        assert waste[S, None] == pytest.approx(0.75, abs=3e-3)
        assert all(waste[S, P] < waste[S, None] for P in (16, 32, 64))
    assert waste[256, 16] == pytest.approx(1 - 512 / 544, abs=1e-6)    # 34 pages of 16
    tables = report.kv_cache_table(out / "results.csv").split("\n\n")
    assert len(tables) == 2
    assert [len(t.splitlines()) for t in tables] == [2 + points, 2 + points]
    assert "twin ms (GB/s)" in tables[1] and "| contiguous | uniform | 1 | 1 | 4 / 4 | 64 |" in \
        tables[0]
    pngs = {"kv_cache_bytes.png", "kv_cache_measured_vs_analytic.png", "kv_cache_waste.png",
            "kv_step_peak_memory.png", "kv_cache_bytes_twin_vs_naive.png",
            "kv_decode_bandwidth.png", "kv_decode_time.png"}
    assert {p.name for p in out.glob("*.png")} == pngs
    assert all((out / n).stat().st_size > 5000 for n in pngs) and "plot:" in text
    assert cli.main(["run", "cpu_kv_cache", "--out", str(out)]) == 0          # resumed
    assert "measured 0 points (nothing new); 108 were already" in capsys.readouterr().out
    assert cli.main(["plot", str(out / "results.csv")]) == 0                    # from the CSV


def _run_small(tmp_path, **axes):
    exp = schema.build(_with(KV, **axes) | {"measure": {"time": False, "error": False,
                                                        "memory": False}})
    runner.run(exp, tmp_path, log=_quiet, draw=False)
    return results.read_rows(tmp_path / "results.csv")


def test_small_real_run_passes_the_column_check(tmp_path):
    rows = _run_small(tmp_path)
    assert len(rows) == len(enumerate_points(schema.build(KV)))
    assert {r["status"] for r in rows} == {"ok"}
    check_columns(rows)


def _spare_page(real=decode.pages_needed):
    return lambda lengths_, page_size_: real(lengths_, page_size_) + 1


def _kv_per_query_head(real=decode.held_bytes):
    def wrong(point):
        got = real(point)
        got["kv_bytes"] *= point.group
        return got
    return wrong


def _floor_lengths(S, batch, mix):
    fr = decode.parse_mix(mix)
    if fr is None:
        return (S,) * batch
    return tuple(max(1, int(fr[b % len(fr)] * S)) for b in range(batch))


def _k_v_per_query_head_traffic(real=decode.step_traffic):
    def wrong(point):
        t = real(point)
        extra = 2 * sum(decode.lengths(point)) * (point.heads - decode.kv_heads(point)) \
            * point.head_dim * 4
        return type(t)(t.bytes_read + extra, t.bytes_written, t.flops)
    return wrong


PLANTED = {"spare_page": ("pages_needed", _spare_page()),       # the pool sized one page large
           "kv_bytes_per_query_head": ("held_bytes", _kv_per_query_head()),
           "lengths_rounded_down": ("sequence_lengths", _floor_lengths),
           "traffic_not_gqa_aware": ("step_traffic", _k_v_per_query_head_traffic())}


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_a_planted_mistake_fails_the_column_check(tmp_path, monkeypatch, bug):
    name, wrong = PLANTED[bug]
    monkeypatch.setattr(decode, name, wrong)
    rows = _run_small(tmp_path)
    assert {r["status"] for r in rows} == {"ok"}
    with pytest.raises(AssertionError):
        check_columns(rows)


def test_host_memory_of_a_kv_point_is_checked_before_it_runs(monkeypatch):
    from cuflash.experiments import hostmem
    p = next(p for p in enumerate_points(schema.build(KV)) if p.method == "twin")
    assert hostmem.needed_bytes(p) == decode.needed_bytes(p)
    monkeypatch.setattr(hostmem, "available_bytes", lambda: 1000)
    assert "not run: needs about" in runner._host_oom(p, schema.build(KV).measure)


# -- GPU ------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_read_pass_reads_every_word():
    import cupy as cp
    for nbytes in (16, 4096, 16 * 256 * 8 * 200 + 48, 1 << 26):
        x = readbw.make_array(nbytes, cp, seed=nbytes % 7)
        assert readbw.read_xor(x) == readbw.host_xor(x.get()), nbytes


@pytest.mark.gpu
def test_gpu_kv_cache_experiment_end_to_end(tmp_path):
    """experiments/kv_cache.yaml at small sizes on the GPU: every row ok, the bytes exact, flash
    and naive against the oracle, the plots drawn."""
    assert gpu_available()
    raw = yaml.safe_load((REPO / "experiments" / "kv_cache.yaml").read_text())
    for ax in raw["axes"]:
        ax["kv_len"] = [512, 2048] if ax["sweep"] != "tq" else [1024]
        if ax["sweep"] == "decode":
            ax["batch"] = [1, 4]
    raw["measure"] = {"repeats": 3, "warmup": 1, "max_seconds": 0.2}
    f = write(tmp_path, raw, "kv_small.yaml")
    out = tmp_path / "out"
    assert cli.main(["run", str(f), "--out", str(out)]) == 0
    rows = results.read_rows(out / "results.csv")
    assert rows and {r["status"] for r in rows} == {"ok"}
    check_columns(rows)
    for r in rows:
        assert r["device"] == "gpu" and r["time_ms_median"] > 0 and r["gbps"] > 0
        if r["method"] != "read_ceiling":
            assert r["error_rel"] is not None and r["error_rel"] < 2e-2, r
    assert len(list(out.glob("*.png"))) == len(raw["plots"])


def test_the_memory_probe_sees_a_second_call(monkeypatch):
    """A KV-cache point's peak is measured on its second call: the first call of a process
    allocates imports and caches that are not the step's."""
    p = next(p for p in enumerate_points(schema.build(KV)) if p.method == "twin")
    calls, probed = [], []
    real_build, real_peak = measure.build_call, measure.peak_memory

    def build(point, inputs):
        call = real_build(point, inputs)
        fn = call.fn
        call.fn = lambda: calls.append(1) or fn()
        return call

    def peak(call):
        probed.append(len(calls))
        return real_peak(call)
    monkeypatch.setattr(measure, "build_call", build)
    monkeypatch.setattr(measure, "peak_memory", peak)
    row = measure.measure_point(p, schema.build(KV).measure)
    assert probed == [1] and row["peak_mem_bytes"] > 0 and row["error_rel"] < 1e-5
