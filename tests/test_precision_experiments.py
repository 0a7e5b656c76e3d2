"""float32's precision in the experiment system: the axis ``precision`` (``cuflash.precision``),
its schema errors, its points (the forward tile's kernel family, one torch row whatever the
precisions), the calls it reaches (naive, the twin's forward and a backward's residuals), the
error sample ``measure.error_heads``, ratios across precisions, the CSV column (and files
without it), experiments/cpu_precision.yaml end to end with its plots and report, and the
shipped experiments/precision.yaml. CPU only."""
from __future__ import annotations

import csv
import math

import numpy as np
import pytest

import cuflash
from cuflash import cli, oracle
from cuflash.precision import PRECISIONS, of_family
from cuflash.tile import F16_SCALED, F16_SPLIT, float32_wgmma_pays
from cuflash.experiments import hostmem, measure, report, results, runner, schema, variants
from cuflash.experiments.plots import with_ratio
from cuflash.experiments.points import KEY_COLUMNS, Point, enumerate_points, point_of_row

from test_experiments import REPO, TINY, FakeMeasure, assert_schema_error, write

#: float32 in each precision and float16 beside it, naive, the twin and torch (GPU-only points
#: are enumerated, not run)
PREC = {"device": "cpu",
        "axes": [{"sweep": "f32", "seq_len": [32, 64], "head_dim": 16, "heads": 2,
                  "dtype": "float32", "precision": list(PRECISIONS), "causal": [False, True],
                  "pass": ["forward", "backward"]},
                 {"sweep": "f16", "seq_len": [32, 64], "head_dim": 16, "heads": 2,
                  "dtype": "float16", "causal": [False, True], "pass": ["forward", "backward"]}],
        "methods": ["naive", "twin", {"name": "torch_sdpa", "backends": ["efficient"]}],
        "measure": {"repeats": 1, "warmup": 0}}
EPS32 = float(np.finfo(np.float32).eps)


def _quiet(*_):
    pass


def _axes(**kw):
    return {"device": "cpu", "methods": ["twin"],
            "axes": dict({"seq_len": 64, "head_dim": 16, "dtype": "float32"}, **kw)}


# -- schema errors ---------------------------------------------------------------------------------

BAD = [
    (_axes(precision="tf31"), "axes.precision", "'tf31' (str) is not a precision"),
    (_axes(precision=["ieee", "fp32"]), "axes.precision[1]", "['ieee', 'tf32', 'highest']"),
    (_axes(precision=32), "axes.precision", "32 (int) is not a precision"),
    (_axes(precision=[]), "axes.precision", "the list is empty"),
    (_axes(precision="native"), "axes.precision", "null for the dtype's default"),
    (_axes(precision=["tf32"], dtype="float16"), "axes.precision",
     "precision ['tf32'] applies to float32 only, and this sweep's dtype has ['float16']"),
    (_axes(precision=[None, "ieee"], dtype=["float32", "bfloat16", "float64"]),
     "axes.precision", "['bfloat16', 'float64']"),
    ({"device": "cpu", "methods": ["twin"], "axes": {"seq_len": 64, "precision": "tf32"}},
     "axes.precision", "dtype has ['float16']"),            # the default dtype is float16
    ({"device": "cpu", "methods": ["twin"],
      "axes": [{"sweep": "a", "dtype": "float32", "precision": "ieee"},
               {"sweep": "b", "dtype": "float64", "precision": "ieee"}]},
     "axes[1].precision", "dtype has ['float64']"),
    ({"device": "cpu", "methods": ["twin"],
      "axes": {"cache": "contiguous", "kv_len": [256], "seq_len": 1, "dtype": "float32",
               "precision": "tf32"}}, "axes.precision", "attention_with_kvcache takes no"),
    ({"methods": [{"name": "flash", "grid": {"kernel": "simt"}}],
      "axes": {"dtype": "float32", "precision": ["ieee", "tf32"]}},
     "methods[0].grid", "computes float32 as precision='ieee', not the sweep's precision='tf32'"),
    ({"methods": [{"name": "flash", "grid": {"kernel": "tf32x3"}}],
      "axes": {"dtype": "float32", "precision": "tf32"}},
     "methods[0].grid", "precision='highest', not the sweep's precision='tf32'"),
    (dict(_axes(), measure={"error_heads": -1}), "measure.error_heads", "must be >= 0"),
    (dict(_axes(), measure={"error_heads": "one"}), "measure.error_heads", "expected an integer"),
]


@pytest.mark.parametrize("data, path, hint", BAD, ids=[b[1] + ":" + b[2][:16] for b in BAD])
def test_schema_error_names_the_key_and_the_value(tmp_path, data, path, hint):
    assert_schema_error(tmp_path, data, path, hint)


def test_a_typo_stops_the_run_before_any_measurement(tmp_path, monkeypatch, capsys):
    calls = FakeMeasure()
    monkeypatch.setattr(runner, "measure_point", calls)
    f = write(tmp_path, dict(TINY, axes=dict(TINY["axes"], precision=["ieee", "tf23"])))
    out = tmp_path / "out"
    assert cli.main(["run", str(f), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "axes.precision[1]" in err and "'tf23'" in err
    assert calls.calls == [] and not out.exists()


def test_the_axis_parses_and_defaults_to_the_dtypes_own():
    assert schema.build(TINY).axes.precision == (None,)
    ax = schema.build(_axes(precision=["tf32", None, "ieee", "tf32"])).axes
    assert ax.precision == ("tf32", None, "ieee")                      # deduplicated, in order
    assert schema.build(_axes(precision="highest")).axes.precision == ("highest",)
    # a grid without a kernel takes each precision's family; a matching kernel is fine
    schema.build({"methods": [{"name": "flash", "grid": {"block_m": [128]}},
                              {"name": "flash", "label": "x3", "grid": {"kernel": "tf32x3"}}],
                  "axes": {"dtype": "float32", "precision": ["highest"], "head_dim": 64}})
    assert "precision" in schema.AXIS_COLUMNS and "precision" in KEY_COLUMNS
    assert "precision" in results.COLUMNS


# -- points ----------------------------------------------------------------------------------------

def test_points_cross_the_precisions_of_the_methods_that_take_one():
    pts = enumerate_points(schema.build(PREC))
    assert len({p.key() for p in pts}) == len(pts)
    assert all(Point.from_json(p.to_json()) == p for p in pts)
    f32 = [p for p in pts if p.sweep == "f32"]
    assert {p.precision for p in pts if p.sweep == "f16"} == {None}
    # twin: every pass at each precision (a backward's residuals come from that forward)
    for pass_ in ("forward", "backward"):
        assert {p.precision for p in f32 if p.method == "twin" and p.pass_ == pass_} == set(
            PRECISIONS)
    # naive too, both passes (its backward computes its five products in the precision)
    for pass_ in ("forward", "backward"):
        assert {p.precision for p in f32 if p.method == "naive" and p.pass_ == pass_} == set(
            PRECISIONS)
    # torch has its own backends: one row per point, whatever the sweep's precisions
    torch = [p for p in f32 if p.method_name == "torch_sdpa"]
    assert torch and {p.precision for p in torch} == {None}
    assert len(torch) == 2 * 2 * 2                            # T x causal x pass
    assert len([p for p in f32 if p.method == "twin"]) == 3 * len(torch)
    p = next(p for p in f32 if p.precision == "tf32" and p.method == "twin")
    assert " float32 precision=tf32" in p.describe() and p.columns()["precision"] == "tf32"
    assert dict(zip(KEY_COLUMNS, p.key()))["precision"] == "tf32"


@pytest.mark.parametrize("device", ["cpu", "gpu"], ids=["enumerated_for_cpu",
                                                       "enumerated_for_a_gpu"])
def test_the_tiles_are_of_the_precisions_family(device):
    exp = schema.build(dict(PREC, methods=["twin", "flash"]))
    limit = schema.DEFAULT_SMEM_LIMIT if device == "gpu" else None
    pts = [p for p in enumerate_points(exp, device, smem_limit=limit)
           if p.dtype == "float32" and p.precision is not None]
    for p in pts:
        if p.fwd_tile is not None:
            assert of_family(p.fwd_tile.kernel) == p.precision, p.describe()
            assert p.fwd_tile == schema.library_tile(16, "float32", False, limit, p.causal,
                                                     precision=p.precision)
        if p.bwd_tile is not None:       # the backward's tile: of the precision's family too
            assert of_family(p.bwd_tile.kernel) == p.precision, p.describe()
            assert p.bwd_tile == schema.library_tile(16, "float32", True, limit, p.causal,
                                                     bool(p.deterministic), precision=p.precision)
    assert {p.fwd_tile.kernel for p in pts if p.fwd_tile and p.runs_twin} >= {"simt", "tf32"}
    assert {p.bwd_tile.kernel for p in pts if p.bwd_tile} >= {"simt", "tf32", "tf32x3"}


def test_point_of_row_reads_the_precision(tmp_path):
    exp = schema.build(PREC)
    runner.run(exp, tmp_path, measure=FakeMeasure(), log=_quiet, draw=False)
    pts = {p.key(): p for p in enumerate_points(exp)}
    with open(tmp_path / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(pts)
    for row in rows:
        assert point_of_row(row).precision == pts[results.row_key(row)].precision
    # resumed: every row matched on its precision
    again = FakeMeasure()
    runner.run(exp, tmp_path, measure=again, log=_quiet, draw=False)
    assert again.calls == []


# -- the calls -------------------------------------------------------------------------------------

def _point(exp, **match):
    return next(p for p in enumerate_points(schema.build(exp))
                if all(getattr(p, k) == v for k, v in match.items()))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_twin_and_naive_forward_run_the_points_precision(precision):
    for method in ("twin", "naive"):
        p = _point(PREC, method=method, precision=precision, pass_="forward", causal=True,
                   seq_len=64)
        inputs = measure.make_inputs(p, 0)
        call = measure.build_call(p, inputs)
        got, = call.outputs(call.fn())
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        if method == "twin":
            want = cuflash.attention(q, k, v, causal=True, precision=precision, tile=p.fwd_tile)
            other = cuflash.attention(q, k, v, causal=True, precision="ieee" if precision != "ieee"
                                      else "tf32")
        else:
            want = cuflash.naive_attention(q, k, v, causal=True, precision=precision)
            other = cuflash.naive_attention(q, k, v, causal=True, precision="ieee"
                                            if precision != "ieee" else "tf32")
        assert np.array_equal(got, want), (method, precision)
        assert not np.array_equal(got, other)          # the precision changed something


@pytest.mark.parametrize("pass_", ["backward", "both"])
def test_a_backward_takes_its_residuals_from_the_precisions_forward(pass_):
    exp = dict(PREC, axes=[dict(PREC["axes"][0], precision="tf32", **{"pass": pass_})])
    p = _point(exp, method="twin", pass_=pass_, causal=False, seq_len=64)
    assert p.precision == "tf32"
    inputs = measure.make_inputs(p, 0)
    call = measure.build_call(p, inputs)
    got = call.outputs(call.fn())
    q, k, v, dout = (inputs[n] for n in ("q", "k", "v", "dout"))

    def grads(precision):
        out, res = cuflash.attention(q, k, v, precision=precision, return_residuals=True)
        return (out,) * (pass_ == "both") + tuple(cuflash.attention_backward(
            dout, res, tile=p.bwd_tile, deterministic=bool(p.deterministic)))
    want, ieee = grads("tf32"), grads("ieee")
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    assert not all(np.array_equal(g, w) for g, w in zip(got, ieee))


def test_naive_on_a_packed_varlen_batch_takes_the_precision():
    """naive_attention_varlen computes float32's products in the point's precision: 'tf32' naive
    errs like the 'tf32' twin (~1e-3), 'highest' naive like float32."""
    exp = {"device": "cpu", "methods": ["naive", "twin"],
           "axes": {"seq_len": 64, "head_dim": 16, "heads": 2, "dtype": "float32",
                    "precision": ["tf32", "highest"], "varlen": {"lengths": [16, 48]}}}
    pts = {(p.method, p.precision): p for p in enumerate_points(schema.build(exp))}
    errs = {}
    for key in (("naive", "tf32"), ("naive", "highest"), ("twin", "tf32")):
        got = measure.measure_point(pts[key], schema.Measure(repeats=1, warmup=0, max_seconds=0.05))
        errs[key] = got["error_rel"]
        assert errs[key] < (3e-3 if key[1] == "tf32" else 1e-5), key
    assert errs["naive", "tf32"] > 20 * errs["naive", "highest"]


# -- the error sample ------------------------------------------------------------------------------

def _sampled_exp(**axes):
    return {"device": "cpu", "methods": ["twin"], "measure": {"error_heads": 1},
            "axes": dict({"seq_len": 32, "head_dim": 16, "batch": 2, "heads": 4,
                          "dtype": "float32", "precision": "tf32"}, **axes)}


def test_error_sample_takes_whole_groups_of_the_first_batch_entry():
    pts = enumerate_points(schema.build(_sampled_exp(group=[1, 2, "heads"],
                                                     **{"pass": ["forward", "backward"]})))
    for p in pts:
        want = {1: (1, 1), 2: (2, 1), 4: (4, 1)}[p.group]   # MQA: every head is one group
        assert measure.error_sample(p, 1) == want
        assert measure.error_sample(p, 0) is None
        assert measure.error_scores(p, 1) == want[0] * 32 * 32 < p.run_scores
    one = next(p for p in pts if p.group == 1)
    assert measure.error_sample(one, 8) == (4, 4)           # all heads, but one batch entry
    single = Point(**{**one.__dict__, "batch": 1})
    assert measure.error_sample(single, 4) is None          # nothing left out


@pytest.mark.parametrize("pass_", ["forward", "backward", "both"])
@pytest.mark.parametrize("group", [1, 2])
def test_sampled_error_is_the_oracle_on_the_first_heads(pass_, group):
    exp = _sampled_exp(group=group, alibi=True, causal=True, **{"pass": pass_})
    p = enumerate_points(schema.build(exp))[0]
    inputs = measure.make_inputs(p, 0)
    call = measure.build_call(p, inputs)
    outputs = call.outputs(call.fn())
    got = measure.oracle_error(p, inputs, outputs, 1)
    nq = group                                  # whole groups: G query heads, one kv head
    q, k, v = inputs["q"][:1, :nq], inputs["k"][:1, :1], inputs["v"][:1, :1]
    opts = dict(causal=True, alibi_slopes=variants.alibi_slopes(4)[:nq])
    refs = ()
    if pass_ != "backward":
        refs += (oracle.oracle_attention(q, k, v, **opts)[0],)
    if pass_ != "forward":
        refs += tuple(oracle.oracle_backward(inputs["dout"][:1, :nq], q, k, v, **opts))
    cut = ((nq,) if pass_ != "backward" else ()) + ((nq, 1, 1) if pass_ != "forward" else ())
    want = max(oracle.rel_error(x[:1, :n], r) for x, n, r in zip(outputs, cut, refs))
    assert got == want and 0 < got < 1e-2
    assert 0 < measure.oracle_error(p, inputs, outputs) < 1e-2     # the whole problem's


def test_error_limit_bounds_the_sample_and_host_memory_counts_it():
    cfg = schema.Measure(repeats=1, warmup=0, max_seconds=0.05, error_limit=32 * 32,
                         error_heads=1, memory=False)
    p = enumerate_points(schema.build(_sampled_exp()))[0]
    assert p.run_scores > cfg.error_limit >= measure.error_scores(p, 1)
    assert measure.measure_point(p, cfg)["error_rel"] > 0
    whole = schema.Measure(repeats=1, warmup=0, max_seconds=0.05, error_limit=32 * 32,
                           memory=False)
    assert "error_rel" not in measure.measure_point(p, whole)
    big = schema.build(_sampled_exp(seq_len=2048, batch=1, heads=8))
    q = enumerate_points(big)[0]
    limit = q.run_scores
    sampled = hostmem.needed_bytes(q, True, limit, error_heads=1)
    assert hostmem.needed_bytes(q, False) < sampled < hostmem.needed_bytes(q, True, limit)


# -- ratios and old files --------------------------------------------------------------------------

def test_ratios_across_precisions():
    def row(method, precision, tile, t, dtype="float32"):
        return {"method": method, "precision": precision, "tile": tile, "time_ms_median": t,
                "status": "ok", "seq_len": 64, "dtype": dtype, "alibi": False}
    rows = [row("flash", "ieee", "simt_m64", 4.0), row("flash", "tf32", "tf32_m128", 1.0),
            row("flash", "highest", "tf32x3_m128", 2.0), row("torch_efficient", None, "", 3.0),
            row("flash", None, "mma_m128", 0.5, "float16"),
            row("torch_efficient", None, "", 1.0, "float16")]
    # torch has no precision: its row is every precision's baseline (same dtype)
    by_torch = schema.Plot("seq_len", "time_ms_median", ratio_denominator="torch_efficient")
    got = {(r["dtype"], r["precision"]): r["time_ms_median"] for r in with_ratio(rows, by_torch)}
    assert got == {("float32", "ieee"): 4 / 3, ("float32", "tf32"): 1 / 3,
                   ("float32", "highest"): 2 / 3, ("float16", None): 0.5}
    # a precision baseline runs another kernel family: its tile differs, the rest matches
    by_ieee = schema.Plot("seq_len", "time_ms_median", ratio_denominator=(("precision", "ieee"),))
    got = {r["precision"]: r["time_ms_median"] for r in with_ratio(rows, by_ieee)}
    assert got == {"tf32": 0.25, "highest": 0.5}


def test_an_old_csv_without_the_precision_column_resumes_as_the_default(tmp_path):
    exp = schema.build(dict(TINY, plots=[{"x": "seq_len", "y": "time_ms_median",
                                          "style": "precision"}]))
    runner.run(exp, tmp_path, measure=FakeMeasure(), log=_quiet, draw=False)
    csv_path = tmp_path / "results.csv"
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    with open(csv_path, "w", newline="") as f:         # as a file from before the axis
        w = csv.DictWriter(f, fieldnames=[c for c in rows[0] if c != "precision"])
        w.writeheader()
        w.writerows({c: v for c, v in r.items() if c != "precision"} for r in rows)
    assert "precision" not in results.read_rows(csv_path)[0]
    both = schema.build(dict(TINY, axes=dict(TINY["axes"], precision=[None, "tf32"]),
                             plots=[{"x": "seq_len", "y": "time_ms_median",
                                     "style": "precision"}]))
    again = FakeMeasure()
    runner.run(both, tmp_path, measure=again, log=_quiet, draw=False)
    assert len(again.calls) == len(rows) and {p.precision for p in again.calls} == {"tf32"}
    on_disk = results.read_rows(csv_path)
    assert len(on_disk) == 2 * len(rows)
    assert {r["precision"] for r in on_disk} == {None, "tf32"}    # the column added
    assert cli.main(["plot", str(csv_path)]) == 0


# -- end to end ------------------------------------------------------------------------------------

def _errors(rows) -> dict:
    """{(pass, method, d, causal, T): {precision: error_rel}} of the float32 rows."""
    out: dict = {}
    for r in rows:
        if r["dtype"] == "float32":
            key = (r["pass"], r["method"], r["head_dim"], r["causal"], r["seq_len"])
            out.setdefault(key, {})[r["precision"]] = r["error_rel"]
    return out


def test_cpu_precision_end_to_end(tmp_path, capsys):
    out = tmp_path / "p"
    args = ["run", "cpu_precision", "--out", str(out), "--set", "measure.max_seconds=0.02"]
    assert cli.main(args) == 0
    text = capsys.readouterr().out
    with open(out / "results.csv", newline="") as f:
        assert "precision" in next(csv.reader(f))                 # the header has the column
    rows = results.read_rows(out / "results.csv")
    assert len(rows) == 192 and {r["status"] for r in rows} == {"ok"}
    assert {r["pass"] for r in rows} == {"forward", "backward"}
    assert {(r["dtype"], r["precision"]) for r in rows} == {
        ("float32", "ieee"), ("float32", "tf32"), ("float32", "highest"),
        ("float16", None), ("bfloat16", None), ("float64", None)}
    assert all(r["error_rel"] is not None and r["tflops"] > 0 for r in rows)
    errors = _errors(rows)
    assert len(errors) == 2 * 2 * 2 * 2 * 2                # pass x method x d x causal x T
    ratios = []
    for key, e in errors.items():
        assert set(e) == set(PRECISIONS), key
        # TF32's 10-bit mantissa: ~1e-3 relative, three orders above float32's rounding
        assert e["tf32"] >= 50 * max(e["ieee"], e["highest"]), (key, e)
        assert 1e-4 < e["tf32"] < 3e-3, (key, e)
        # 3xTF32 keeps float32's accuracy: within 2x of the CUDA cores' (give or take one
        # float32 epsilon: at a few 1e-7, one rounding more is already 2x)
        assert e["highest"] <= 2 * e["ieee"] + EPS32 and e["ieee"] < 1e-6, (key, e)
        ratios.append(e["highest"] / e["ieee"])
    assert math.exp(np.mean(np.log(ratios))) <= 2.0, ratios
    pngs = {p.name for p in out.glob("*.png")}
    assert pngs == {"tflops.png", "error.png", "float32_time_vs_ieee.png",
                    "float32_error_by_method.png", "error_vs_tflops.png"}
    assert all((out / n).stat().st_size > 5000 for n in pngs) and "plot:" in text
    table = report.precision_table(out / "results.csv")
    lines = table.splitlines()
    assert len(lines) == 2 + 2 * 2 * 2 * 2 * 6            # pass x d x causal x T x 6 kinds
    assert "| forward | 16 | false | 64 | float32 | tf32 |" in table
    assert "| forward | 32 | true | 256 | float16 | native |" in table
    assert "| backward | 32 | true | 256 | float32 | highest |" in table
    assert "naive error" in lines[0] and "torch" not in lines[0]
    assert report.main(["precision", str(out / "results.csv")]) == 0
    # resumed: nothing measured again
    assert cli.main(args) == 0
    assert f"measured 0 points (nothing new); {len(rows)} were already" in capsys.readouterr().out


#: The columns of the report tests' hand-made results rows
_REPORT_COLS = ["status", "method", "method_name", "backend", "pass", "head_dim", "causal",
                "seq_len", "dtype", "precision", "tflops", "error_rel", "tile", "layout",
                "time_ms_median"]


def _report_csv(tmp_path, data):
    """A results CSV of these rows (columns _REPORT_COLS) for the report tables."""
    path = tmp_path / "r.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(_REPORT_COLS)
        w.writerows(data)
    return path


def test_precision_report_against_torch(tmp_path):
    data = [["ok", "flash", "flash", "", "forward", 64, "false", 1024, "float32", p, t, e, tile, "",
             1.0] for p, t, e, tile in (("ieee", 40, 3e-7, "simt_m64"),
                                        ("tf32", 120, 5e-4, "tf32_m128"),
                                        ("highest", 80, 3e-7, "tf32x3_m128"))]
    data += [["ok", "flash", "flash", "", "forward", 64, "false", 1024, "float16", "", 300, 2e-4,
              "wgmma_m128", "", 1.0],
             ["ok", "torch_efficient", "torch_sdpa", "efficient", "forward", 64, "false", 1024,
              "float32", "", 50, 4e-7, "", "", 1.0],
             ["unavailable", "torch_efficient", "torch_sdpa", "efficient", "forward", 64, "false",
              1024, "float64", "", "", "", "", "", ""],
             ["ok", "flash", "flash", "", "forward", 64, "false", 1024, "float64", "", 30, 2e-15,
              "dmma_m128", "", 1.0],
             ["ok", "torch_math", "torch_sdpa", "math", "forward", 64, "false", 1024, "float64",
              "", 12, 3e-15, "", "", 1.0],
             ["oom", "torch_math", "torch_sdpa", "math", "forward", 64, "false", 1024, "float16",
              "", "", "", "", "", ""]]
    path = _report_csv(tmp_path, data)
    lines = report.precision_table(path).splitlines()
    assert lines[0].startswith("| pass | d | causal | T | dtype | precision | flash TFLOP/s |")
    assert "flash / torch efficient" in lines[0] and "naive error" not in lines[0]
    assert lines[0].endswith("| torch math TFLOP/s | flash / torch math | tile |")
    at = "| forward | 64 | false | 1024 |"
    # float64 against torch's math path (its efficient kernel has none); float16's math row
    # ran out of memory: a dash, not a ratio
    assert lines[2:] == [
        f"{at} float32 | ieee | 40 | 3e-07 | 50 | 4e-07 | 0.80 | – | – | simt_m64 |",
        f"{at} float32 | tf32 | 120 | 0.0005 | 50 | 4e-07 | 2.40 | – | – | tf32_m128 |",
        f"{at} float32 | highest | 80 | 3e-07 | 50 | 4e-07 | 1.60 | – | – | tf32x3_m128 |",
        f"{at} float16 | native | 300 | 0.0002 | – | – | – | – | – | wgmma_m128 |",
        f"{at} float64 | native | 30 | 2e-15 | – | – | – | 12 | 2.50 | dmma_m128 |"]
    # the summary: float32 against torch's efficient kernel, float64 against its math path
    # (the only torch row there), float16 against none
    summary = report.precision_summary(path).splitlines()
    assert summary[0] == ("| pass | dtype, precision | flash TFLOP/s d = 64 | / torch d = 64 "
                          "| torch | error |")
    assert summary[2:] == [
        "| forward | float32 ieee | 40 | 0.80 | efficient | 3e-07 |",
        "| forward | float32 tf32 | 120 | 2.40 | efficient | 0.0005 |",
        "| forward | float32 highest | 80 | 1.60 | efficient | 3e-07 |",
        "| forward | float16 native | 300 | – | – | 0.0002 |",
        "| forward | float64 native | 30 | 2.50 | math | 2e-15 |"]
    assert report.main(["precision_summary", str(path)]) == 0


def test_precision_summary_spans_and_reference_choice(tmp_path):
    """Ranges fold causal and T; where torch's efficient kernel ran the dtype its ratio is the
    one taken even if the math path ran too (math is float64's fallback, not a second pick)."""
    data = []
    for T, causal, t_mine, t_eff, t_math, err in ((1024, "false", 100, 50, 10, 1e-3),
                                                  (4096, "true", 300, 60, 20, 4e-4)):
        data += [["ok", "flash", "flash", "", "forward", 128, causal, T, "float32", "tf32",
                  t_mine, err, "x", "", 1.0],
                 ["ok", "torch_efficient", "torch_sdpa", "efficient", "forward", 128, causal,
                  T, "float32", "", t_eff, 1e-7, "", "", 1.0],
                 ["ok", "torch_math", "torch_sdpa", "math", "forward", 128, causal, T,
                  "float32", "", t_math, 1e-7, "", "", 1.0]]
    path = _report_csv(tmp_path, data)
    lines = report.precision_summary(path).splitlines()
    assert lines[2:] == ["| forward | float32 tf32 | 100–300 | 2.00–5.00 | efficient "
                         "| 0.0004–0.001 |"]


def test_shipped_precision_experiments():
    gpu = schema.load(REPO / "experiments" / "precision.yaml",
                      smem_limit=schema.DEFAULT_SMEM_LIMIT)
    assert [ax.name for ax in gpu.sweeps] == ["float32", "other_dtypes", "float32_backward",
                                              "other_dtypes_backward"]
    assert [ax.passes for ax in gpu.sweeps] == [("forward",)] * 2 + [("backward",)] * 2
    for ax in gpu.sweeps[::2]:
        assert ax.precision == PRECISIONS
    for ax in gpu.sweeps[1::2]:
        assert ax.precision == (None,)
    assert gpu.measure.error_heads == 1 and gpu.measure.error_limit == 8192 ** 2
    pts = enumerate_points(gpu, "gpu", smem_limit=schema.DEFAULT_SMEM_LIMIT)
    assert len(pts) == 420                                   # the count its comment gives
    fwd = [p for p in pts if p.pass_ == "forward"]
    bwd = [p for p in pts if p.pass_ == "backward"]
    assert len(fwd) == 252 and len(bwd) == 168
    flash = [p for p in pts if p.method == "flash"]
    torch = [p for p in pts if p.method_name == "torch_sdpa"]
    assert len(flash) == 6 * 3 * 2 * 3 + 6 * 2 * 2 * 3
    assert len(torch) == 2 * 4 * 3 * 2 * 3 + 2 * 4 * 2 * 2 * 3
    assert {p.precision for p in torch} == {None}
    assert max(p.seq_len for p in pts) == 16384
    assert {p.head_dim for p in bwd} == {64, 128}     # the TF32 backward's head dims
    for p in flash:
        if p.precision:
            tile = p.bwd_tile if p.pass_ == "backward" else p.fwd_tile
            assert of_family(tile.kernel) == p.precision, p.describe()
            # the kernel cuflash.attention's default runs there (a dense batch): float32's
            # Hopper warpgroup kernels where tile.float32_wgmma_pays, each pass by its own rule
            bwd = p.pass_ == "backward"
            warpgroup = tile.kernel in ("wgmma_tf32", F16_SCALED, *F16_SPLIT)
            assert warpgroup == float32_wgmma_pays(p.precision, p.head_dim, p.kv_len, bwd), \
                p.describe()
    hopper = {(p.pass_, p.precision): p.bwd_tile or p.fwd_tile for p in flash
              if p.precision and p.head_dim == 64 and p.seq_len == 4096 and not p.causal}
    assert hopper[("backward", "tf32")].kernel == F16_SCALED   # d = 64 (NOTES v71)
    assert hopper[("backward", "highest")].kernel == "wgmma_f16x3"
    assert hopper[("forward", "highest")].kernel == "wgmma_f16x3"
    assert hopper[("forward", "tf32")].kernel == "wgmma_f16x1"   # d = 64: x1 (NOTES v62)
    # the error sample, one head of the first batch entry, fits the limit up to T = 4096 (the
    # whole problem would not fit at any T); T = 16384 is timed only
    for p in pts:
        assert p.run_scores > gpu.measure.error_limit
        fits = measure.error_scores(p, 1) <= gpu.measure.error_limit
        assert fits == (p.seq_len <= 4096), p.describe()
    cpu = schema.load(REPO / "experiments" / "cpu_precision.yaml")
    assert cpu.device == "cpu"
    cpu_pts = enumerate_points(cpu)
    assert len(cpu_pts) == 192                              # the count its comment gives
    combos = {(p.dtype, p.precision, p.pass_) for p in cpu_pts}
    assert combos == {(p.dtype, p.precision, p.pass_) for p in flash}
    assert len(schema.tile_grid_points(REPO / "experiments" / "precision.yaml")) > 0
