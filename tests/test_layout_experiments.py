"""Issue 12's experiments (``cuflash.experiments.layouts``): GQA's ``group`` axis and the
materialized K/V baseline, ``varlen`` mixes packed against padded. The shipped files validate
and have the point counts their comments give; schema errors name the key; FLOPs and bytes
equal hand counts on tiny cases (and the padded and materialized layouts count the same FLOPs as
the packed / in-place ones); the CPU twins run end to end into a results folder with their
columns and plots, every method agreeing with the float64 oracle; a planted miscount fails the
column check. CPU only."""
from __future__ import annotations

import csv

import numpy as np
import pytest

from cuflash import cli, iomodel
from cuflash.experiments import (layouts, measure, report, results, runner, schema,
                                 torch_sdpa)
from cuflash.experiments.points import Point, enumerate_points, point_of_row
from cuflash.mask import Mask
from cuflash.tile import TileConfig

from test_experiments import REPO, assert_host_bound, assert_schema_error, FakeMeasure, write

GQA = {"device": "cpu",
       "axes": {"seq_len": [16, 32], "head_dim": 16, "batch": 2, "heads": 4,
                "dtype": "float32", "causal": True, "group": [1, 2, "heads"],
                "pass": ["forward", "backward"]},
       "methods": ["naive", "twin", {"name": "twin", "label": "mat", "layout": "materialized"}],
       "measure": {"repeats": 1, "warmup": 0}}
VARLEN = {"device": "cpu",
          "axes": {"seq_len": [16, 40], "head_dim": 16, "heads": 2, "dtype": "float32",
                   "causal": True, "varlen": [None, {"lengths": [3, 5]}, {"lengths": ["8x2", 1]}],
                   "pass": ["forward", "backward"]},
          "methods": ["naive", "twin", {"name": "twin", "label": "pad", "layout": "padded"}],
          "measure": {"repeats": 1, "warmup": 0}}


def _quiet(*_):
    pass


def _dry_run(name, capsys) -> int:
    """The point count ``cuflash run FILE --dry-run`` prints (and its exit status 0)."""
    assert cli.main(["run", str(REPO / "experiments" / f"{name}.yaml"), "--dry-run"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"{name}: ") and " points on " in first, first
    return int(first.split()[1])


# -- the shipped files ----------------------------------------------------------------------------

def test_shipped_layout_experiments_validate_with_their_point_counts(capsys):
    counts = {n: _dry_run(n, capsys) for n in ("gqa", "varlen", "cpu_gqa", "cpu_varlen")}
    assert counts == {"gqa": 152, "varlen": 108, "cpu_gqa": 44, "cpu_varlen": 36}  # as commented
    for name, count in counts.items():
        text = (REPO / "experiments" / f"{name}.yaml").read_text()
        assert f"= {count}" in text, name              # the header comment says the count
    gqa = schema.load(REPO / "experiments" / "gqa.yaml", smem_limit=schema.DEFAULT_SMEM_LIMIT)
    pts = enumerate_points(gqa, "gpu", smem_limit=schema.DEFAULT_SMEM_LIMIT)
    assert {p.heads for p in pts} == {16} and {p.head_dim for p in pts} == {128}
    assert {p.group for p in pts} == {1, 2, 4, 8, 16}                      # 'heads': MQA
    assert {p.seq_len * p.batch for p in pts} == {16384}                   # batch·T
    assert {p.group for p in pts if p.layout == "materialized"} == {2, 4, 8, 16}
    assert {p.method for p in pts} == {"flash", "flash_materialized", "torch_flash", "torch_cudnn"}
    assert all(p.causal and p.dtype == "float16" for p in pts)
    vl = schema.load(REPO / "experiments" / "varlen.yaml", smem_limit=schema.DEFAULT_SMEM_LIMIT)
    pts = enumerate_points(vl, "gpu", smem_limit=schema.DEFAULT_SMEM_LIMIT)
    assert {p.seq_len for p in pts} == {16384, 32768, 65536} and {p.head_dim for p in pts} == {
        64, 128}
    assert {p.varlen for p in pts} == {"2048", "512,2048,256,4096,1024",
                                       "8192,1024,512x2,256x4,128x8"}
    assert {p.method: p.layout for p in pts} == {"flash": None, "flash_padded": "padded",
                                                 "torch_padded_flash": "padded"}
    long_tail = next(p for p in pts if p.layout == "padded" and p.varlen.startswith("8192")
                     and p.seq_len == 16384)
    assert long_tail.run_shape[0] == 17 and long_tail.run_shape[2] == 8192   # as commented
    for name in ("cpu_gqa", "cpu_varlen"):
        assert schema.load(REPO / "experiments" / f"{name}.yaml").device == "cpu"


# -- schema errors --------------------------------------------------------------------------------

def _with(base, **axes):
    return dict(base, axes=dict(base["axes"], **axes))


BAD = [
    (_with(GQA, group=[1, 3]), "axes.group[1]", "does not divide heads=4"),
    (_with(GQA, group=0), "axes.group", "expected a group size G >= 1"),
    (_with(GQA, group=["mqa"]), "axes.group[0]", "'heads' (MQA"),
    (_with(GQA, groups=[2]), "axes.groups", "valid keys"),
    (_with(VARLEN, varlen=[2048]), "axes.varlen[0]", "{lengths: [...]}"),
    (_with(VARLEN, varlen={"lengths": [16, "8y2"]}), "axes.varlen.lengths[1]", "'LxN'"),
    (_with(VARLEN, varlen={"lengths": [0]}), "axes.varlen.lengths[0]", ">= 1"),
    (_with(VARLEN, varlen={"lengths": ["8x0"]}), "axes.varlen.lengths[0]", ">= 1"),
    (_with(VARLEN, varlen={"lengths": [4, "16x1000000000000"]}), "axes.varlen.lengths[1]",
     "makes 1000000000000 sequences; a mix holds at most 1048576"),   # (was a MemoryError)
    (_with(VARLEN, varlen={"lengths": ["16x1000000", "16x48577"]}), "axes.varlen.lengths",
     "item 1: '16x48577' makes 1048577 sequences; a mix holds at most 1048576"),
    (_with(VARLEN, varlen={"lengths": [1.5]}), "axes.varlen.lengths[0]", "give an int"),
    (_with(VARLEN, varlen={"length": [16]}), "axes.varlen.length", "valid keys"),
    (_with(VARLEN, varlen={}), "axes.varlen", "needs 'lengths'"),
    (_with(VARLEN, kv_len=[8]), "axes.varlen", "need kv_len: seq_len"),
    (_with(VARLEN, mask={"kind": "documents", "lengths": [8]}), "axes.varlen", "two sweeps"),
    (dict(GQA, methods=[{"name": "twin", "layout": "materialised"}]), "methods[0].layout",
     "'materialized'"),
    (_with(dict(GQA, methods=[{"name": "twin", "layout": "materialized"}]), group=1),
     "methods[0].layout", "needs a sweep with group > 1"),
    (dict(GQA, methods=[{"name": "torch_sdpa", "layout": "materialized"}]), "methods[0].layout",
     "enable_gqa"),
    (dict(GQA, methods=[{"name": "twin", "layout": "padded"}]), "methods[0].layout",
     "or varlen"),
    (_with(dict(VARLEN, methods=[{"name": "twin", "layout": "padded"}]), causal=False),
     "methods[0].layout", "causal: true"),
    (dict(GQA, plots=[{"x": "groupp", "y": "kv_bytes"}]), "plots[0].x", "'group'"),
]


@pytest.mark.parametrize("data, path, hint", BAD, ids=[b[1] + ":" + b[2][:14] for b in BAD])
def test_schema_error_names_the_key_and_the_value(tmp_path, data, path, hint):
    assert_schema_error(tmp_path, data, path, hint)


def test_group_and_varlen_parse_and_default_to_none():
    exp = schema.build(GQA)
    assert exp.axes.group == (1, 2, "heads") and exp.axes.groups(4) == (1, 2, 4)
    assert schema.build({"axes": {"seq_len": 8}}).axes.group == (1,)
    ax = schema.build(VARLEN).axes
    assert ax.varlen == (None, "3,5", "8x2,1")
    assert layouts.parse_varlen("8x2,1").lengths == (8, 8, 1)
    assert layouts.varlen_text((256, 256, 256, 128, 256)) == "256x3,128,256"
    for text in ("2048", "512,2048,256", "8192,256x31", "4x2,4"):
        assert layouts.varlen_text(layouts.parse_varlen(text).lengths) in (text, "4x3")


# -- points ---------------------------------------------------------------------------------------

def test_points_cross_group_and_varlen_where_layouts_apply():
    pts = enumerate_points(schema.build(GQA))
    # 2 T x 2 passes x (3 G x (naive, twin) + materialized at G = 2, 4)
    assert len(pts) == 2 * 2 * (3 * 2 + 2) and len({p.key() for p in pts}) == len(pts)
    assert {p.group for p in pts if p.layout == "materialized"} == {2, 4}
    assert {(p.group, p.kv_heads) for p in pts} == {(1, 4), (2, 2), (4, 1)}
    pts = enumerate_points(schema.build(VARLEN))
    # 2 T x 2 passes x (3 mixes x (naive, twin) + padded for the 2 mixes)
    assert len(pts) == 2 * 2 * (3 * 2 + 2) and len({p.key() for p in pts}) == len(pts)
    assert {p.varlen for p in pts if p.layout == "padded"} == {"3,5", "8x2,1"}
    for p in enumerate_points(schema.build(GQA)) + pts:
        assert Point.from_json(p.to_json()) == p
        cols = p.columns()
        row = {k: results.cell_text(v) for k, v in cols.items()}
        q = point_of_row(row)
        assert (q.group, q.varlen, q.layout, q.run_shape, q.kv_heads) == (
            p.group, p.varlen, p.layout, p.run_shape, p.kv_heads)
        assert results.row_key(row) == p.key()
    # an old row (no group or varlen column) is the G = 1 dense point
    old = {k: results.cell_text(v) for k, v in pts[0].columns().items()
           if k not in ("group", "kv_heads", "varlen")}
    assert point_of_row(old).group == 1 and results.row_key(old) == pts[0].key()


def test_shapes_of_each_layout():
    pts = {(p.method, p.group, p.varlen, p.pass_, p.seq_len): p
           for p in enumerate_points(schema.build(GQA)) + enumerate_points(schema.build(VARLEN))}
    p = pts["twin", 2, None, "backward", 16]
    assert layouts.input_shapes(p) == {"q": (2, 4, 16, 16), "k": (2, 2, 16, 16),
                                       "v": (2, 2, 16, 16), "dout": (2, 4, 16, 16)}
    p = pts["mat", 4, None, "forward", 32]
    assert layouts.input_shapes(p) == {"q": (2, 4, 32, 16), "k": (2, 1, 32, 16),
                                       "v": (2, 1, 32, 16)}                 # repeated in the call
    p = pts["twin", 1, "3,5", "forward", 16]
    assert layouts.input_shapes(p) == {"q": (16, 2, 16), "k": (16, 2, 16), "v": (16, 2, 16)}
    assert layouts.cu_seqlens(p).tolist() == [0, 3, 8, 11, 16]
    assert layouts.cu_seqlens(p).dtype == np.int32
    p = pts["pad", 1, "3,5", "forward", 16]
    assert p.run_shape == (4, 2, 5, 5) and layouts.cu_seqlens(p) is None
    assert layouts.input_shapes(p)["q"] == (4, 2, 5, 16)
    p = pts["pad", 1, "8x2,1", "forward", 40]       # 8, 8, 1, 8, 8, 1, 6: the last cut at 40
    assert p.run_shape == (7, 2, 8, 8)
    assert layouts.cu_seqlens(pts["twin", 1, "8x2,1", "forward", 40]).tolist() == [
        0, 8, 16, 17, 25, 33, 34, 40]


# -- FLOPs and bytes, by hand ---------------------------------------------------------------------

def _point(exp, **match):
    found = [p for p in enumerate_points(schema.build(exp))
             if all(getattr(p, k) == v for k, v in match.items())]
    assert len(found) == 1, (match, found)
    return found[0]


def _tiny_gqa(**kw):
    return {"device": "cpu", "methods": ["twin", {"name": "twin", "label": "mat",
                                                  "layout": "materialized"}],
            "axes": {"seq_len": 8, "head_dim": 16, "batch": 2, "heads": 4, "group": 2,
                     "dtype": "float16", "causal": True, "pass": ["forward", "backward"], **kw}}


def test_gqa_flops_and_bytes_by_hand():
    """B = 2, Hq = 4, G = 2 (Hkv = 2), T = S = 8, d = 16, float16, causal."""
    pairs = 8 * 9 // 2                                   # causal: 36 visible pairs per head
    for pass_, per_pair in (("forward", 4), ("backward", 10)):
        inplace = _point(_tiny_gqa(), method="twin", pass_=pass_)
        mat = _point(_tiny_gqa(), method="mat", pass_=pass_)
        want = per_pair * 2 * 4 * 16 * pairs            # 4·B·Hq·d per pair, 2.5x backward
        assert runner.predicted(inplace).flops == runner.predicted(mat).flops == want
        # K, V held: 2·B·Hkv·S·d·2 bytes in place, G times that materialized; q: B·Hq·T·d·2
        assert layouts.held_bytes(inplace) == {"kv_bytes": 2 * 2 * 2 * 8 * 16 * 2,
                                               "qkv_bytes": 2048 + 2 * 4 * 8 * 16 * 2}
        assert layouts.held_bytes(mat) == {"kv_bytes": 4096, "qkv_bytes": 4096 + 2048}
        # the materialized call moves the attention's bytes plus its copies: forward reads K/V
        # (2048 B) and writes them twice (4096 B); backward reads dK/dV per query head (4096 B)
        # and writes their group sums (2048 B)
        a, b = runner.predicted(inplace), runner.predicted(mat)
        extra = (2048, 4096) if pass_ == "forward" else (4096, 2048)
        assert (b.bytes_read - a.bytes_read, b.bytes_written - a.bytes_written) == extra
    # the attention part is the IO model over B·Hq heads
    p = _point(_tiny_gqa(), method="twin", pass_="forward")
    want = iomodel.flash_forward(8, 8, 8, 16, "float16", True, p.fwd_tile)
    assert runner.predicted(p).bytes_total == want.bytes_total


def test_varlen_flops_and_bytes_by_hand():
    """One row of 16 tokens holding lengths 3, 5, 3, 5; 2 heads, d = 16, float32, causal."""
    exp = {"device": "cpu", "methods": [{"name": "twin", "grid": {"block_m": 16, "block_n": 16}},
                                        {"name": "twin", "label": "pad", "layout": "padded",
                                         "grid": {"block_m": 16, "block_n": 16}}],
           "axes": {"seq_len": 16, "head_dim": 16, "heads": 2, "dtype": "float32",
                    "causal": True, "varlen": {"lengths": [3, 5]}, "pass": "forward"}}
    packed, padded = _point(exp, method="twin"), _point(exp, method="pad")
    real_pairs = 2 * (3 * 4 // 2) + 2 * (5 * 6 // 2)           # 42, not 16·17/2 = 136
    assert runner.predicted(packed).flops == runner.predicted(padded).flops == 4 * 2 * 16 * 42
    assert real_pairs == 42
    # held: packed 16 rows, padded 4 sequences x 5 rows, of q, k, v (2 heads, 16 x 4 bytes)
    row = 2 * 16 * 4
    assert layouts.held_bytes(packed) == {"kv_bytes": 2 * 16 * row, "qkv_bytes": 3 * 16 * row}
    assert layouts.held_bytes(padded) == {"kv_bytes": 2 * 20 * row, "qkv_bytes": 3 * 20 * row}
    # moved, one 16 x 16 tile per sequence: per (sequence, head) Q once, K and V once, O and lse
    # once: read L·d·4 + 2·L·d·4, written L·d·4 + L·4; L = 3 and 5 twice each, 2 heads
    read = sum(2 * 2 * 3 * L * 16 * 4 for L in (3, 5))
    written = sum(2 * 2 * (L * 16 * 4 + L * 4) for L in (3, 5))
    got = runner.predicted(packed)
    assert (got.bytes_read, got.bytes_written) == (read, written) == (6144, 2176)
    got = runner.predicted(padded)                              # 8 entries of 5 rows, pads too
    assert (got.bytes_read, got.bytes_written) == (8 * 3 * 5 * 16 * 4, 8 * (5 * 16 * 4 + 5 * 4))


def test_backward_bytes_and_run_scores_follow_the_sequences():
    exp = _with(VARLEN, seq_len=40, varlen={"lengths": ["8x2", 1]})
    p = _point(exp, method="twin", pass_="backward")
    lengths = [8, 8, 1, 8, 8, 1, 6]
    assert p.run_scores == 2 * sum(L * L for L in lengths)
    tile = p.bwd_tile
    want = sum((iomodel.flash_backward(2 * lengths.count(L), L, L, 16, "float32", True, tile)
                for L in (8, 1, 6)), iomodel.Traffic(0, 0, 0.0))
    got = runner.predicted(p)
    assert (got.bytes_read, got.bytes_written) == (want.bytes_read, want.bytes_written)
    assert got.flops == 10 * 2 * 16 * sum(L * (L + 1) // 2 for L in lengths)


def test_torch_refuses_packed_varlen_and_takes_gqa_with_enable_gqa():
    exp = dict(VARLEN, methods=[{"name": "torch_sdpa", "backends": ["flash"]},
                                {"name": "torch_sdpa", "label": "tp", "backends": ["flash"],
                                 "layout": "padded"}])
    for p in enumerate_points(schema.build(exp)):
        if p.varlen is not None and p.layout != "padded":
            assert "no packed varlen" in layouts.torch_refusal(p)
            with pytest.raises(measure.Unavailable, match="cu_seqlens"):
                torch_sdpa.build_call(p, {})
        else:
            assert layouts.torch_refusal(p) is None
    gqa = dict(GQA, methods=[{"name": "torch_sdpa", "backends": ["flash"]}])
    assert all(layouts.torch_refusal(p) is None for p in enumerate_points(schema.build(gqa)))


# -- the calls on the CPU -------------------------------------------------------------------------

def test_every_layout_runs_the_same_problem_as_the_oracle():
    """Each layout's call on the twin and naive agrees with the float64 oracle on the point's
    own arrays (materialized: dK, dV summed back to Hkv heads; packed: one sequence at a
    time), and materialized equals in place."""
    for exp in (GQA, VARLEN):
        cfg = schema.build(exp).measure
        outs = {}
        for p in enumerate_points(schema.build(exp)):
            inputs = measure.make_inputs(p, 0)
            call = measure.build_call(p, inputs)
            got = call.outputs(call.fn())
            assert measure.oracle_error(p, inputs, got) < 1e-5, p.describe()
            want = {"forward": 1, "backward": 3}[p.pass_]
            assert len(got) == want
            assert [g.shape for g in got] == [inputs[n].shape for n in (
                ("q",) if p.pass_ == "forward" else ("q", "k", "v"))]
            outs[p.key()] = got
            assert cfg.error
        if exp is GQA:
            for p in enumerate_points(schema.build(exp)):
                if p.layout == "materialized":
                    twin = next(x for x in enumerate_points(schema.build(exp))
                                if x.method == "twin" and x.group == p.group
                                and x.pass_ == p.pass_ and x.seq_len == p.seq_len)
                    for a, b in zip(outs[p.key()], outs[twin.key()]):
                        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_needed_bytes_bounds_the_measured_peak_of_layouts():
    for exp in (_with(GQA, seq_len=96, head_dim=64), _with(VARLEN, seq_len=160, head_dim=64)):
        for p in enumerate_points(schema.build(exp))[::2]:
            assert_host_bound(p, 2 ** 24)


# -- the column check, end to end, and a planted miscount -----------------------------------------

def _lengths(mix: str | None, T: int) -> list[int]:
    """Sequence lengths of a row of T tokens, written out independently of layouts."""
    if mix is None:
        return [T]
    cycle = []
    for item in mix.split(","):
        L, _, n = item.partition("x")
        cycle += [int(L)] * int(n or 1)
    out, k = [], 0
    while sum(out) < T:
        out.append(min(cycle[k % len(cycle)], T - sum(out)))
        k += 1
    return out


def check_columns(rows: list[dict]) -> None:
    """FLOPs and held bytes of result rows against formulas written from the row alone: FLOPs
    4·batch·Hq·d per visible causal pair of each real sequence (x2.5 backward), kv_bytes
    2·rows·heads·d·itemsize (Hkv heads, Hq materialized; rows: B·S, the packed tokens, or n·max
    padded), qkv_bytes adds q's rows·Hq·d·itemsize."""
    for r in rows:
        B, H, d, T = r["batch"], r["heads"], r["head_dim"], r["seq_len"]
        e = {"float32": 4, "float16": 2, "float64": 8}[r["dtype"]]
        L = _lengths(r.get("varlen"), T)
        pairs = sum(n * (n + 1) // 2 for n in L)
        assert r["flops"] == {"forward": 4, "backward": 10}[r["pass"]] * B * H * d * pairs, r
        rows_held = B * (len(L) * max(L) if r["layout"] == "padded" else T)
        kv_heads = H if r["layout"] == "materialized" else H // r["group"]
        assert r["kv_heads"] == H // r["group"]
        assert r["kv_bytes"] == 2 * rows_held * kv_heads * d * e, r
        assert r["qkv_bytes"] == r["kv_bytes"] + rows_held * H * d * e, r


def _run_cpu(name, out, capsys, *sets):
    args = ["run", name, "--out", str(out)] + [x for s in sets for x in ("--set", s)]
    assert cli.main(args) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("name, methods, pngs", [
    ("cpu_gqa", {"twin", "twin_materialized", "naive"},
     {"gqa_time.png", "gqa_kv_bytes.png", "gqa_speedup_over_materialized.png"}),
    ("cpu_varlen", {"twin", "twin_padded", "naive"},
     {"varlen_time.png", "varlen_speedup_over_padded.png", "varlen_bytes_held.png",
      "varlen_bytes_moved.png"}),
])
def test_cpu_twin_end_to_end(tmp_path, capsys, name, methods, pngs):
    out = tmp_path / name
    text = _run_cpu(name, out, capsys)
    header = (out / "results.csv").read_text().splitlines()[0].split(",")
    for col in ("group", "kv_heads", "varlen", "layout", "kv_bytes", "qkv_bytes", "flops",
                "pred_bytes", "time_ms_median", "tflops", "peak_mem_bytes", "error_rel"):
        assert col in header, col
    rows = results.read_rows(out / "results.csv")
    assert len(rows) == {"cpu_gqa": 44, "cpu_varlen": 36}[name]
    assert {r["status"] for r in rows} == {"ok"} and {r["method"] for r in rows} == methods
    assert all(r["error_rel"] < 1e-5 and r["time_ms_median"] > 0 and r["tflops"] > 0
               for r in rows)
    check_columns(rows)
    if name == "cpu_gqa":
        assert {r["group"] for r in rows} == {1, 2, 4, 8}
        mat = [r for r in rows if r["layout"] == "materialized"]
        assert mat and all(r["group"] > 1 for r in mat)
    else:
        assert {r["varlen"] for r in rows} == {"32", "16,48,8,64,32", "64,16,8x4"}
        assert all(r["kv_heads"] == 1 for r in rows)                    # GQA inside varlen
        pad = {(r["varlen"], r["pass"], r["seq_len"]): r for r in rows if r["layout"]}
        for r in rows:
            if r["method"] == "twin" and r["varlen"] != "32":          # padding costs bytes
                p = pad[r["varlen"], r["pass"], r["seq_len"]]
                assert p["flops"] == r["flops"] and p["pred_bytes"] > r["pred_bytes"]
                assert p["qkv_bytes"] > r["qkv_bytes"]
    table = getattr(report, name.removeprefix("cpu_") + "_table")(out / "results.csv")
    assert len(table.splitlines()) == 2 + len({(r["pass"], r["head_dim"], r["seq_len"],
                                                r["group"] if name == "cpu_gqa" else r["varlen"])
                                               for r in rows})
    assert {p.name for p in out.glob("*.png")} == pngs
    assert all((out / n).stat().st_size > 5000 for n in pngs) and "plot:" in text
    again = _run_cpu(name, out, capsys)                       # resumed: nothing measured again
    assert f"measured 0 points (nothing new); {len(rows)} were already" in again


def _padded_shape_flops(point, real=layouts.flops):
    """Planted bug: a padded row's FLOPs counted over the padded shapes (pads included)."""
    if point.layout != "padded":
        return real(point)
    b, h, T, S = point.run_shape
    return iomodel.attention_flops(b * h, T, S, point.head_dim, True) * (
        2.5 if point.pass_ == "backward" else 1)


def _hkv_materialized(point, real=layouts.held_bytes):
    """Planted bug: the materialized K/V counted with Hkv heads, as if held once."""
    got = real(point)
    if point.layout == "materialized":
        got["kv_bytes"] //= point.group
    return got


PLANTED = {"padded_flops": ("flops", _padded_shape_flops, VARLEN),
           "materialized_kv_bytes": ("held_bytes", _hkv_materialized, GQA),
           # a packed batch's FLOPs counted as one causal row of all its tokens
           "varlen_row_flops": ("flops", layouts.variants.flops, VARLEN)}


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_a_planted_miscount_fails_the_column_check(tmp_path, monkeypatch, bug):
    """check_columns catches these mistakes (tools/mutants.py plants them in the source too)."""
    name, wrong, exp = PLANTED[bug]
    monkeypatch.setattr(layouts, name, wrong)
    runner.run(schema.build(_with(exp, group=[1, 2])), tmp_path, measure=FakeMeasure(),
               log=_quiet, draw=False)
    with pytest.raises(AssertionError):
        check_columns(results.read_rows(tmp_path / "results.csv"))


def test_fake_run_rows_pass_the_column_check(tmp_path):
    """The check passes on every layout's rows of a faked run (so the failures above are the
    planted bugs', not the check's)."""
    for i, exp in enumerate((GQA, _with(VARLEN, group=[1, 2]))):
        out = tmp_path / str(i)
        runner.run(schema.build(exp), out, measure=FakeMeasure(), log=_quiet, draw=False)
        rows = results.read_rows(out / "results.csv")
        assert {r["status"] for r in rows} == {"ok"}
        check_columns(rows)
        with open(out / "results.csv", newline="") as f:
            for raw in csv.DictReader(f):
                assert int(raw["flops"]) == round(layouts.flops(point_of_row(raw)))


def test_describe_and_mask_model_unchanged_for_dense_points():
    p = _point(_tiny_gqa(), method="mat", pass_="forward")
    assert "G=2 (Hkv=2) K/V materialized" in p.describe()
    q = _point(VARLEN | {"axes": dict(VARLEN["axes"], seq_len=16, varlen={"lengths": [3, 5]},
                                      **{"pass": "forward"})}, method="pad")
    assert "varlen(3,5) padded to 4x5" in q.describe()
    dense = _point(_tiny_gqa(group=[1, 2]), method="twin", pass_="forward", group=1)
    assert layouts.problems(dense) == [(8, 8, 8, Mask.make(causal=True))]
    assert isinstance(dense.fwd_tile, TileConfig)
