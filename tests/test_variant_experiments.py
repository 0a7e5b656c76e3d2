"""Attention variants in the experiment system (``cuflash.experiments.variants``): the axes
window, softcap, alibi and mask, lists of named sweeps, ``layout: padded``, ratio baselines by
column values; their schema errors, points and keys, FLOPs and bytes (the IO model's under the
point's mask; the twin's own byte counts for packed documents), the CPU run end to end with its
plots and report, and resume with and without the new columns. CPU only."""
from __future__ import annotations

import csv
import itertools

import numpy as np
import pytest

from cuflash import TileConfig, iomodel, twin
from cuflash.experiments import measure, report, results, runner, schema, torch_sdpa, variants
from cuflash.experiments.plots import with_ratio
from cuflash.experiments.points import KEY_COLUMNS, Point, enumerate_points, point_of_row
from cuflash.mask import Mask
from cuflash import cli

from test_experiments import REPO, assert_host_bound, assert_schema_error, TINY, FakeMeasure, write

DOCS = {"kind": "documents", "lengths": [16, 48]}
VARIANT = {"device": "cpu",
           "axes": {"seq_len": [64, 128], "head_dim": 16, "heads": 2, "dtype": "float32",
                    "causal": True, "window": [None, [15, 0]], "softcap": [None, 5.0],
                    "alibi": [False, True], "mask": [None, DOCS],
                    "pass": ["forward", "backward"]},
           "methods": ["naive", "twin", {"name": "twin", "label": "twin_padded",
                                         "layout": "padded"}],
           "measure": {"repeats": 1, "warmup": 0}}


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _quiet(*_):
    pass


# -- schema errors ---------------------------------------------------------------------------------

def _axes(**kw):
    return {"device": "cpu", "methods": ["twin"],
            "axes": dict({"seq_len": 64, "head_dim": 16, "causal": True}, **kw)}


BAD = [
    (_axes(window=255), "axes.window", "expected a pair [left, right]"),
    (_axes(window=[255, 0]), "axes.window[0]", "window: [[255, 0]]"),
    (_axes(window=[[255, -2]]), "axes.window[0][1]", "-1 or null for unbounded (right)"),
    (_axes(window=[None, [1.5, 0]]), "axes.window[1][0]", "expected an int >= 0"),
    (_axes(window=[[None, -1]]), "axes.window[0]", "which is no window: write null"),
    (_axes(window=[[1, 2, 3]]), "axes.window[0]", "expected a pair"),
    (_axes(window=[]), "axes.window", "the list is empty"),
    (_axes(softcap=0), "axes.softcap", "finite number > 0"),
    (_axes(softcap=[None, -30.0]), "axes.softcap[1]", "finite number > 0"),
    (_axes(softcap=[None, float("inf")]), "axes.softcap[1]", "finite number > 0"),
    (_axes(softcap="big"), "axes.softcap", "'big' (str)"),
    (_axes(softcap=True), "axes.softcap", "True (bool)"),
    (_axes(alibi="yes"), "axes.alibi", "true or false"),
    (_axes(mask="documents"), "axes.mask", "a mapping with 'kind'"),
    (_axes(mask={"kind": "prefix"}), "axes.mask.kind", "'documents'"),
    (_axes(mask=[None, {"kind": "documents"}]), "axes.mask[1]", "need 'lengths'"),
    (_axes(mask={"kind": "documents", "lengths": [16, 0]}), "axes.mask.lengths[1]", ">= 1"),
    (_axes(mask={"kind": "documents", "lengths": 16, "gap": 1}), "axes.mask.gap",
     "valid keys"),
    (_axes(mask=DOCS, kv_len=[32]), "axes.mask", "need kv_len: seq_len"),
    ({"axes": [{"seq_len": 16}, {"seq_len": 32}]}, "axes[0]", "add 'sweep: NAME'"),
    ({"axes": [{"sweep": "a"}, {"sweep": "a"}]}, "axes[1].sweep", "also the name of axes[0]"),
    ({"axes": [{"sweep": "a/b"}]}, "axes[0].sweep", "must be letters"),
    ({"axes": []}, "axes", "the list of sweeps is empty"),
    ({"axes": [{"sweep": "a"}, 7]}, "axes[1]", "expected a mapping of axes"),
    ({"axes": [{"sweep": "a"}, {"sweep": "b", "seq_len": "long"}]}, "axes[1].seq_len",
     "expected an integer"),
    ({"axes": [{"sweep": "a"}, {"sweep": "b", "window": [3, 0]}]}, "axes[1].window[0]",
     "expected a pair"),
    (dict(_axes(), methods=[{"name": "twin", "layout": "stacked"}]), "methods[0].layout",
     "'padded'"),
    (dict(_axes(), methods=["twin", {"name": "naive", "layout": "padded"}]),
     "methods[1].layout", "needs a sweep with mask"),
    (dict(_axes(mask=DOCS, causal=False), methods=[{"name": "twin", "layout": "padded"}]),
     "methods[0].layout", "causal: true"),
    (dict(_axes(), plots=[{"x": "seq_len", "y": "tflops",
                           "ratio": {"denominator": {"windoww": None}}}]),
     "plots[0].ratio.denominator.windoww", "not a column a baseline can differ in"),
    (dict(_axes(), plots=[{"x": "seq_len", "y": "tflops", "ratio": {"denominator": {}}}]),
     "plots[0].ratio.denominator", "an empty baseline"),
    (dict(_axes(), plots=[{"x": "seq_len", "y": "tflops",
                           "ratio": {"numerator": {"window": [1, 2]}}}]),
     "plots[0].ratio.numerator.window", "one value"),
    (dict(_axes(), plots=[{"x": "seq_len", "y": "tflops", "filter": {"windw": None}}]),
     "plots[0].filter.windw", "valid keys"),
]


@pytest.mark.parametrize("data, path, hint", BAD, ids=[b[1] + ":" + b[2][:12] for b in BAD])
def test_schema_error_names_the_key_and_the_value(tmp_path, data, path, hint):
    assert_schema_error(tmp_path, data, path, hint)


def test_variant_axes_parse_and_default_to_no_variant():
    plain = schema.build(TINY)
    ax = plain.axes
    assert (ax.window, ax.softcap, ax.alibi, ax.mask, ax.name) == ((None,), (None,), (False,),
                                                                   (None,), None)
    exp = schema.build(_axes(window=[None, [255, -1], [3, None], [255, -1]], softcap=30,
                             alibi=[False, True], mask=[None, DOCS]))
    ax = exp.axes
    assert ax.window == (None, (255, None), (3, None))          # -1 and null: unbounded; deduped
    assert ax.softcap == (30.0,) and isinstance(ax.softcap[0], float)
    assert ax.mask == (None, "documents(16,48)") and ax.alibi == (False, True)
    with pytest.raises(AttributeError, match="2 sweeps"):
        schema.build({"axes": [{"sweep": "a"}, {"sweep": "b"}]}).axes


def test_shipped_variant_experiments():
    gpu = schema.load(REPO / "experiments" / "variants.yaml", smem_limit=schema.DEFAULT_SMEM_LIMIT)
    assert [ax.name for ax in gpu.sweeps] == ["windows", "scores", "documents"]
    pts = enumerate_points(gpu, "gpu", smem_limit=schema.DEFAULT_SMEM_LIMIT)
    assert len(pts) == 608                                   # the count its comment gives
    assert sum(p.method_name == "torch_sdpa" and variants.torch_refusal(p) is not None
               for p in pts) == 200
    win = {p.window for p in pts if p.sweep == "windows"}
    assert win == {None, (255, 0), (1023, 0), (4095, 0)}
    assert max(p.seq_len for p in pts if p.sweep == "windows") == 32768
    cpu = schema.load(REPO / "experiments" / "cpu_variants.yaml")
    assert cpu.device == "cpu" and [ax.name for ax in cpu.sweeps] == [ax.name for ax in gpu.sweeps]
    assert len(schema.tile_grid_points(REPO / "experiments" / "variants.yaml")) > 0


# -- points and keys -------------------------------------------------------------------------------

def test_points_cross_the_variants_and_padded_only_documents():
    exp = schema.build(VARIANT)
    pts = enumerate_points(exp)
    # 2 T x 2 windows x 2 softcaps x 2 alibi x 2 masks x 2 passes, naive and twin; padded: the
    # documents half only
    assert len(pts) == 2 * 2 * 2 * 2 * 2 * 2 * 2 + 2 * 2 * 2 * 2 * 2
    padded = [p for p in pts if p.layout == "padded"]
    assert padded and all(p.mask == "documents(16,48)" and p.method == "twin_padded"
                          for p in padded)
    assert len({p.key() for p in pts}) == len(pts)
    assert all(Point.from_json(p.to_json()) == p for p in pts)
    p = next(p for p in pts if p.window and p.softcap and p.alibi and p.mask and p.layout)
    cols = p.columns()
    assert (cols["window"], cols["softcap"], cols["alibi"], cols["mask"], cols["layout"]) == (
        "15,0", 5.0, True, "documents(16,48)", "padded")
    key = dict(zip(KEY_COLUMNS, p.key()))
    assert (key["window"], key["softcap"], key["alibi"], key["mask"]) == (
        "15,0", "5", "true", "documents(16,48)")
    assert "window=15,0 softcap=5 alibi documents(16,48) padded to 2x48" in p.describe()
    # the padded batch: each document its own entry, padded to the longest
    assert p.run_shape == (2, 2, 48, 48) and p.run_scores == 2 * 2 * 48 * 48
    q = next(x for x in pts if x.seq_len == 128 and x.layout == "padded")
    assert variants.Documents((16, 48)).in_row(128) == [16, 48, 16, 48]
    assert q.run_shape == (4, 2, 48, 48)


def test_sweeps_are_their_own_rows_and_tiles_follow_the_band():
    exp = schema.build({"device": "cpu", "methods": ["twin"],
                        "axes": [{"sweep": "a", "seq_len": 64, "head_dim": 16},
                                 {"sweep": "b", "seq_len": 64, "head_dim": 16,
                                  "window": [None, [8, 8], [8, -1]], "causal": [False, True]},
                                 ]})
    pts = enumerate_points(exp)
    assert [(p.sweep, p.window, p.causal) for p in pts] == [
        ("a", None, False), ("b", None, False), ("b", (8, 8), False), ("b", (8, None), False),
        ("b", None, True), ("b", (8, 8), True), ("b", (8, None), True)]
    # a point two sweeps share is measured in each: its keys differ in 'sweep'
    assert len({p.key() for p in pts}) == 7
    # the default tile follows the band's causal, as the library's does
    from cuflash.experiments.schema import library_tile
    for p in pts:
        assert p.fwd_tile == library_tile(16, p.dtype, False, None,
                                          Mask.make(p.causal, p.window).causal)


def test_alibi_slopes_and_call_options():
    s = variants.alibi_slopes(8)
    assert s.dtype == np.float32 and s.shape == (8,)
    assert np.allclose(s, [2.0 ** (-k) for k in range(1, 9)])          # 2^(-8k/H), H = 8
    assert np.allclose(variants.alibi_slopes(4), [2.0 ** (-2 * k) for k in range(1, 5)])
    exp = schema.build(VARIANT)
    p = next(p for p in enumerate_points(exp)
             if p.window and p.softcap and p.alibi and p.mask and p.method == "twin")
    opts = variants.call_options(p)
    assert opts["causal"] is True and opts["window"] == (15, 0) and opts["softcap"] == 5.0
    assert np.array_equal(opts["alibi_slopes"], variants.alibi_slopes(2))
    ids = np.asarray(opts["mask_mod"].arrays()[0][1])
    assert ids.shape == (1, 64) and ids.tolist()[0] == [0] * 16 + [1] * 48
    padded = Point(**{**p.__dict__, "layout": "padded", "method": "twin_padded"})
    assert "mask_mod" not in variants.call_options(padded)


def test_torch_sdpa_is_unavailable_for_variants_it_cannot_fuse():
    exp = schema.build(dict(VARIANT, methods=[{"name": "torch_sdpa", "backends": ["flash"]},
                                              {"name": "torch_sdpa", "label": "tp",
                                               "backends": ["flash"], "layout": "padded"}]))
    for p in enumerate_points(exp):
        assert p.device == "gpu"
        why = variants.torch_refusal(p)
        if p.window or p.softcap or p.alibi or (p.mask and p.layout != "padded"):
            with pytest.raises(measure.Unavailable, match="naive-like"):
                torch_sdpa.build_call(p, {})
            assert why and "explicit T x S attn_mask" in why
        else:
            assert why is None          # plain, and the padded documents: torch runs them


# -- FLOPs and bytes -------------------------------------------------------------------------------

@pytest.mark.parametrize("pass_", ["forward", "backward", "both"])
@pytest.mark.parametrize("window", [[31, 0], [8, 3], [0, -1]])
def test_window_point_predictions_equal_iomodel(pass_, window):
    exp = schema.build({"device": "cpu", "methods": ["naive", "twin",
                                                     {"name": "twin", "label": "atomic",
                                                      "deterministic": False}],
                        "axes": {"seq_len": 200, "kv_len": ["seq_len", 150], "head_dim": 32,
                                 "heads": 3, "batch": 2, "causal": [False, True],
                                 "window": [window], "pass": pass_}})
    pts = enumerate_points(exp)
    assert len(pts) == 12
    for p in pts:
        mask = Mask.make(causal=p.causal, window=window)
        args = (p.bh, p.seq_len, p.kv_len, p.head_dim, p.dtype, mask)
        method = "naive" if p.method == "naive" else "flash"
        tile = p.bwd_tile if pass_ == "backward" else p.fwd_tile
        want = iomodel.predict(method, pass_, *args, tile=tile,
                               deterministic=bool(p.deterministic))
        if pass_ == "both" and method == "flash":
            want = (iomodel.predict("flash", "forward", *args, tile=p.fwd_tile)
                    + iomodel.predict("flash", "backward", *args, tile=p.bwd_tile,
                                      deterministic=bool(p.deterministic)))
        got = runner.predicted(p)
        assert (got.bytes_read, got.bytes_written, got.flops) == (
            want.bytes_read, want.bytes_written, want.flops), p.describe()
        pairs = mask.visible_pairs(p.seq_len, p.kv_len)
        assert pairs < p.seq_len * p.kv_len
        per_pass = {"forward": 1, "backward": 2.5, "both": 3.5}[pass_]
        assert got.flops == pytest.approx(4 * p.bh * p.head_dim * pairs * per_pass)


CASES = list(itertools.product([(16,), (5, 40, 3), (64, 7)], [37, 130],
                               [(True, None), (False, None), (True, (9, None)), (False, (4, 6))],
                               [(16, 16), (32, 64)]))


@pytest.mark.parametrize("lengths, T, band, tile", CASES)
def test_document_mask_is_what_the_mask_mod_shows_and_the_twin_visits(lengths, T, band, tile):
    docs = variants.Documents(lengths)
    causal, window = band
    band = Mask.make(causal=causal, window=window)
    dm = docs.model_mask(band, T)
    mod = docs.mask_mod(1, T)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    shown = band.visible(i, j, T, T) & mod.evaluate(0, 0, i, j)
    assert np.array_equal(dm.visible(i, j, T, T), shown)
    assert dm.visible_pairs(T, T) == int(shown.sum())
    # the twin skips the tiles the mask_mod hides whole: its bytes are the model's, to the byte
    B, d = 2, 16
    rng = np.random.default_rng(T)
    q, k, v, do = (rng.standard_normal((B, T, d)).astype(np.float32) for _ in range(4))
    mods = dict(mask_mod=mod, heads=B)
    bm, bn = tile
    counter = twin.ByteCounter()
    out, lse = twin.forward(q, k, v, mask=band, scale=0.3, block_m=bm, block_n=bn,
                            counter=counter, **mods)
    model = iomodel.flash_forward(B, T, T, d, np.float32, dm, TileConfig(bm, bn))
    assert (counter.bytes_read, counter.bytes_written) == (model.bytes_read, model.bytes_written)
    for det in (True, False):
        counter = twin.ByteCounter()
        twin.backward(do, q, k, v, out, lse, mask=band, scale=0.3, block_m=bm, block_n=bn,
                      deterministic=det, counter=counter, **mods)
        model = iomodel.flash_backward(B, T, T, d, np.float32, dm, TileConfig(bm, bn), det)
        assert (counter.bytes_read, counter.bytes_written) == (model.bytes_read,
                                                               model.bytes_written), det


def test_padded_counts_real_flops_and_its_own_bytes():
    exp = schema.build(dict(VARIANT, axes=dict(VARIANT["axes"], window=None, softcap=None,
                                               alibi=False, mask=DOCS, seq_len=128)))
    pts = {(p.method, p.pass_): p for p in enumerate_points(exp)}
    for pass_ in ("forward", "backward"):
        packed, padded = pts["twin", pass_], pts["twin_padded", pass_]
        real = sum(Mask.make(causal=True).visible_pairs(n, n) for n in (16, 48, 16, 48))
        f = {"forward": 4, "backward": 10}[pass_] * packed.bh * 16 * real
        assert runner.predicted(packed).flops == runner.predicted(padded).flops == f
        b, h, L, _ = padded.run_shape
        tile = padded.fwd_tile if pass_ == "forward" else padded.bwd_tile
        want = iomodel.predict("flash", pass_, b * h, L, L, 16, "float32", True, tile=tile)
        got = runner.predicted(padded)
        assert (got.bytes_read, got.bytes_written) == (want.bytes_read, want.bytes_written)
        assert got.bytes_total > runner.predicted(packed).bytes_total


# -- running: the CPU end to end, resume, plots ----------------------------------------------------

def test_cpu_variants_end_to_end(tmp_path, capsys):
    out = tmp_path / "v"
    assert cli.main(["run", "cpu_variants", "--out", str(out),
                     "--set", "axes[0].seq_len=[64,128]", "--set", "axes[1].seq_len=[64]",
                     "--set", "axes[2].seq_len=[96]"]) == 0
    text = capsys.readouterr().out
    rows = results.read_rows(out / "results.csv")
    assert {r["status"] for r in rows} == {"ok"}
    assert {r["sweep"] for r in rows} == {"windows", "scores", "documents"}
    # every method ran the point's variant: the oracle with the same options agrees
    assert all(r["error_rel"] < 1e-5 for r in rows)
    assert {r["window"] for r in rows} == {None, "15,0", "63,0"}
    assert {(r["softcap"], r["alibi"]) for r in rows if r["sweep"] == "scores"} == {
        (None, False), (5.0, False), (None, True), (5.0, True)}
    docs = [r for r in rows if r["mask"]]
    padded = [r for r in docs if r["layout"] == "padded"]
    assert padded and all(r["method"] == "twin_padded" for r in padded)
    for r in padded:           # same real FLOPs as the packed row, more predicted bytes
        twin_row = next(x for x in docs if x["method"] == "twin" and x["pass"] == r["pass"])
        assert r["flops"] == twin_row["flops"] and r["pred_bytes"] > twin_row["pred_bytes"]
    naive_docs = [r for r in docs if r["method"] == "naive"]
    assert all("naive model leaves out" in r["note"] for r in naive_docs)
    pngs = {p.name for p in out.glob("*.png")}
    assert pngs == {"window_time.png", "window_pred_bytes.png", "window_tflops_vs_causal.png",
                    "scores_overhead.png", "documents_speedup_over_padded.png",
                    "documents_bytes_saved.png"}
    assert all((out / n).stat().st_size > 5000 for n in pngs) and "plot:" in text
    tables = report.variants_tables(out / "results.csv")
    assert "window 15,0" in tables and "softcap+alibi" in tables
    assert "| forward | 16 | documents(16,48,32) | 96 |" in tables
    # resumed: nothing measured again
    assert cli.main(["run", "cpu_variants", "--out", str(out),
                     "--set", "axes[0].seq_len=[64,128]", "--set", "axes[1].seq_len=[64]",
                     "--set", "axes[2].seq_len=[96]"]) == 0
    assert f"measured 0 points (nothing new); {len(rows)} were already" in capsys.readouterr().out


def test_point_of_row_rebuilds_the_variant(tmp_path):
    exp = schema.build(VARIANT)
    runner.run(exp, tmp_path, measure=FakeMeasure(), log=_quiet, draw=False)
    pts = {p.key(): p for p in enumerate_points(exp)}
    for row in _rows(tmp_path / "results.csv"):
        p = pts[results.row_key(row)]
        q = point_of_row(row)
        assert (q.window, q.softcap, q.alibi, q.mask, q.layout, q.run_shape) == (
            p.window, p.softcap, p.alibi, p.mask, p.layout, p.run_shape)
        assert int(row["flops"]) == round(variants.flops(q))
        assert report.model_args(row)[-1] == variants.model_mask(p)


def test_resume_matches_on_the_variant_columns(tmp_path):
    exp = schema.build(VARIANT)
    first = FakeMeasure()
    runner.run(exp, tmp_path, measure=first, log=_quiet, draw=False)
    n = len(first.calls)
    assert n == len(enumerate_points(exp)) and n == len(_rows(tmp_path / "results.csv"))
    again = FakeMeasure()
    runner.run(exp, tmp_path, measure=again, log=_quiet, draw=False)
    assert again.calls == []                      # softcap '5' and window '15,0' matched
    # a new variant value is measured, the rest kept
    more = schema.build(dict(VARIANT, axes=dict(VARIANT["axes"], softcap=[None, 5.0, 30])))
    third = FakeMeasure()
    runner.run(more, tmp_path, measure=third, log=_quiet, draw=False)
    assert third.calls and {p.softcap for p in third.calls} == {30.0}
    assert len(third.calls) == n // 2


def test_an_old_csv_without_the_variant_columns_resumes_and_plots(tmp_path):
    exp = schema.build(dict(TINY, plots=[{"x": "seq_len", "y": "time_ms_median"}]))
    runner.run(exp, tmp_path, measure=FakeMeasure(), log=_quiet, draw=False)
    csv_path = tmp_path / "results.csv"
    rows = _rows(csv_path)
    new = set(schema.VARIANT_COLUMNS) | {"sweep", "layout"}
    old_cols = [c for c in rows[0] if c not in new]
    with open(csv_path, "w", newline="") as f:        # as a file from before the variants
        w = csv.DictWriter(f, fieldnames=old_cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    typed = results.read_rows(csv_path)
    assert typed[0]["alibi"] is False and "window" not in typed[0]
    # the old rows are the no-variant points of a variant experiment: only the window is new
    windowed = schema.build(dict(TINY, axes=dict(TINY["axes"], window=[None, [7, -1]]),
                                 plots=[{"x": "seq_len", "y": "time_ms_median"}]))
    again = FakeMeasure()
    runner.run(windowed, tmp_path, measure=again, log=_quiet, draw=False)
    assert len(again.calls) == len(rows) and all(p.window == (7, None) for p in again.calls)
    on_disk = _rows(csv_path)
    assert len(on_disk) == 2 * len(rows) and set(on_disk[0]) >= new   # the new columns added
    assert cli.main(["plot", str(csv_path)]) == 0
    assert (tmp_path / "00_time_ms_median_vs_seq_len.png").stat().st_size > 5000


def test_ratio_to_a_baseline_by_column_values():
    def row(method, window, T, t, tile="m64_n64", softcap=None):
        return {"method": method, "window": window, "seq_len": T, "time_ms_median": t,
                "status": "ok", "tile": tile, "softcap": softcap, "alibi": False}
    rows = [row("twin", None, 64, 2.0), row("twin", "15,0", 64, 1.0),
            row("twin", None, 128, 8.0), row("twin", "15,0", 128, 2.0),
            row("naive", None, 64, 4.0), row("naive", "15,0", 64, 3.0),
            row("twin", "15,0", 256, 1.0),                             # no baseline: dropped
            row("twin", "15,0", 64, 5.0, softcap=5.0)]                 # another variant
    plot = schema.Plot(x="seq_len", y="time_ms_median", ratio_denominator=(("window", None),))
    got = {(r["method"], r["seq_len"], r["softcap"]): r["time_ms_median"]
           for r in with_ratio(rows, plot)}
    assert got == {("twin", 64, None): 0.5, ("twin", 128, None): 0.25, ("naive", 64, None): 0.75}
    exp = schema.build(dict(TINY, plots=[{"x": "seq_len", "y": "tflops",
                                          "ratio": {"denominator": {"window": None}}}]))
    assert exp.plots[0].ratio_denominator == (("window", None),)


def test_needed_bytes_bounds_the_measured_peak_of_variants():
    """hostmem.needed_bytes stays an upper bound for variant points (the padded shapes, the
    mask_mod's boolean matrices in naive and the oracle)."""
    exp = schema.build(dict(VARIANT, axes=dict(VARIANT["axes"], seq_len=192, head_dim=64,
                                               mask=[None, {"kind": "documents",
                                                            "lengths": [32, 100]}])))
    for p in enumerate_points(exp)[::3]:
        assert_host_bound(p, exp.measure.error_limit)


def test_legends_name_the_variant_and_order_windows_by_size():
    from cuflash.experiments.plots import _sorted_unique, series_text
    assert series_text("window", None) == "window=none" and series_text("method", "twin") == "twin"
    assert series_text("softcap", 30.0) == "softcap=30.0"
    got = _sorted_unique([("4095,0",), (None,), ("255,0",), ("1023,0",)], ("window",), {})
    assert got == [("255,0",), ("1023,0",), ("4095,0",), (None,)]
