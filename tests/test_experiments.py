"""The experiment system: schema errors, --set, resume, OOM as data, plots from a CSV, ncu parsing,
and cpu_quick end to end. CPU only and fast: measurements are faked unless the test is about them."""
from __future__ import annotations

import csv
import json
import sys
import types
from pathlib import Path

import pytest
import yaml

from cuflash import cli
from cuflash.experiments import demo, measure, ncu, results, runner, schema
from cuflash.experiments.points import Point, enumerate_points

REPO = Path(__file__).resolve().parents[1]


def write(tmp_path, data, name="exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def assert_schema_error(tmp_path, data, path, hint):
    """Loading `data` fails with a SchemaError naming the file, the key path and `hint`."""
    f = write(tmp_path, data)
    with pytest.raises(schema.SchemaError) as err:
        schema.load(f)
    msg = str(err.value)
    assert str(f) in msg and f": {path}: " in msg and hint in msg, msg


def assert_host_bound(p, error_limit) -> int:
    """hostmem.needed_bytes(p) bounds what CPU point p allocates: its inputs plus the tracemalloc
    peak of one call and its oracle check (the first call's caches made beforehand). Returns the
    bytes used."""
    import tracemalloc
    from cuflash.experiments import hostmem
    inputs = measure.make_inputs(p, 0)
    call = measure.build_call(p, inputs)
    call.fn()                                  # first-call caches out of the way
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        measure.oracle_error(p, inputs, call.outputs(call.fn()))
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    used = peak + sum(a.nbytes for a in inputs.values())
    need = hostmem.needed_bytes(p, True, error_limit)
    assert need - hostmem.SLACK_BYTES >= used, (p.describe(), need, used)
    return used


TINY = {"device": "cpu",
        "axes": {"seq_len": [16, 32, 64, 128], "head_dim": 16, "heads": 2, "dtype": "float32"},
        "methods": ["naive", "twin"],
        "measure": {"repeats": 1, "warmup": 0}}


class FakeMeasure:
    """Counts calls; returns plausible numbers; raises what ``fail(point)`` returns."""

    def __init__(self, fail=lambda p: None):
        self.calls: list[Point] = []
        self.fail = fail

    def __call__(self, point, cfg):
        self.calls.append(point)
        exc = self.fail(point)
        if exc is not None:
            raise exc
        t = 1e-3 * point.seq_len * (point.seq_len if point.method == "naive" else 1)
        return {"repeats": 1, "time_ms_median": t, "time_ms_p20": t * 0.9, "time_ms_p80": t * 1.1,
                "peak_mem_bytes": 4 * point.scores if point.method == "naive"
                else 64 * point.seq_len * point.bh}


# -- schema errors -----------------------------------------------------------------------------------

BAD = [
    ({"axes": {"seq_lenn": [1]}}, "axes.seq_lenn", "valid keys"),
    ({"axes": {"seq_len": "long"}}, "axes.seq_len", "expected an integer"),
    ({"measure": {"repeats": 2.5}}, "measure.repeats", "expected an integer"),
    ({"measure": {"time": "yes"}}, "measure.time", "true or false"),
    ({"methods": ["naive", "flashy"]}, "methods[1].name", "'torch_sdpa'"),
    ({"axes": {"dtype": ["float16", "float8"]}}, "axes.dtype[1]", "'bfloat16'"),
    ({"axes": {"head_dim": 60}}, "axes.head_dim", "valid"),
    ({"device": "tpu"}, "device", "'gpu'"),
    ({"methods": [{"name": "flash", "grid": {"block_m": [64, 48]}}]},
     "methods[0].grid.block_m[1]", "[16, 32, 64, 128, 256]"),
    ({"methods": [{"name": "flash", "grid": {"kernel": "mma", "num_warps": 8, "block_m": 32,
                                             "block_n": 64}}]},
     "methods[0].grid", "cannot run the forward pass"),
    ({"methods": [{"name": "flash", "grid": {"kernel": "mma"}}], "axes": {"dtype": "float32"}},
     "methods[0].grid", "float32"),
    ({"methods": [{"name": "naive", "grid": {"block_m": 64}}]}, "methods[0].grid", "valid keys"),
    ({"methods": [{"name": "torch_sdpa", "backends": ["flash", "xformers"]}]},
     "methods[0].backends[1]", "'cudnn'"),
    ({"plots": [{"x": "seq_len", "y": "tflopz"}]}, "plots[0].y", "tflops"),
    ({"plots": [{"x": "seq_len", "y": "hbm_bytes"}]}, "plots[0].y", "valid"),
    ({"plots": [{"x": "seq_len", "y": "tflops", "kind": "pie"}]}, "plots[0].kind", "'heatmap'"),
    ({"plots": [{"x": "seq_len", "y": "tflops", "filter": {"method": "flashy"}}]},
     "plots[0].filter.method", "'naive'"),
    ({"plots": [{"x": "block_n", "y": "block_m", "kind": "heatmap"}]}, "plots[0].value",
     "needs 'value'"),
    ({"plots": [{"x": "block_n", "y": "block_m", "kind": "heatmap", "value": "method"}]},
     "plots[0].value", "not a numeric column"),
    ({"plots": [{"x": "tile", "y": "tflops", "logx": True}]}, "plots[0].logx",
     "x='tile' is not a numeric column"),
    ({"plots": [{"x": "seq_len", "y": "time_ms_median", "ratio": {"numerator": "torch"}}]},
     "plots[0].ratio.numerator", "'flash'"),
    ({"axes": {"seq_len": [1000], "batch": {"tokens": 16384}}}, "axes.batch.tokens", "multiple"),
    ({"methods": ["naive", {"name": "naive"}]}, "methods[1].label", "also used"),
    ({"plots": [{"x": "tflops", "y": "error_rel", "kind": "scatter",
                 "ratio": {"numerator": "naive"}}]}, "plots[0].ratio",
     "a scatter plot has no ratio"),
    # found by a fuzz of the runner: each passed, and did something else than asked
    ({"measure": {"max_seconds": float("inf")}}, "measure.max_seconds",
     "expected a finite number > 0.0, got inf"),
    ({"plots": [{"x": "seq_len", "y": "tflops", "name": "speed"},
                {"x": "seq_len", "y": "time_ms_median", "name": "speed"}]}, "plots[1].name",
     "'speed' names plots[0] too"),
    ({"axes": {"pass": ["forward", "backward"]},
      "plots": [{"x": "seq_len", "y": "tflops", "filter": {"pass": "forwad"}}]},
     "plots[0].filter.pass", "'forwad' (str) is not a value of pass in this experiment's sweeps; "
                             "they have ['backward', 'forward']"),
    ({"axes": {"seq_len": [16, 32]},
      "plots": [{"x": "seq_len", "y": "tflops", "filter": {"seq_len": [32, 999]}}]},
     "plots[0].filter.seq_len", "999 (int) is not a value of seq_len"),
    ({"axes": {"dtype": "float32", "causal": [True]},
      "plots": [{"x": "seq_len", "y": "tflops", "filter": {"causal": 1}}]},
     "plots[0].filter.causal", "1 (int) is not a value of causal"),
    ({"axes": {"softcap": [None, 30.0]},
      "plots": [{"x": "seq_len", "y": "tflops", "filter": {"softcap": 7.0}}]},
     "plots[0].filter.softcap", "7.0 (float) is not a value of softcap"),
    ({"plots": [{"x": "seq_len", "y": "tflops", "filter": {"sweep": "nonexistent"}}]},
     "plots[0].filter.sweep", "'nonexistent' (str) is not a value of sweep"),
    ({"plots": [{"x": "seq_len", "y": "note"}]}, "plots[0].y",
     "'note' is not a numeric column; a line plot draws numbers"),
    ({"plots": [{"x": "seq_len", "y": "dtype", "kind": "scatter"}]}, "plots[0].y",
     "a scatter plot draws numbers"),
    ("# a key twice: PyYAML would keep the last\nmethods: [naive]\nmethods: [twin]\n",
     "<top level>", "the key 'methods' is given twice in one mapping (lines 2 and 3)"),
    ("# twice on one line (was taken: the check compared line numbers)\n"
     "axes: {seq_len: [32], seq_len: [64]}\n",
     "<top level>", "the key 'seq_len' is given twice in one mapping (line 2)"),
    # PyYAML's error in one line, and a whole file read as one string cut short (session 38)
    ("device: cpu\naxes: {seq_len: [32\n", "<top level>",
     "not valid YAML: line 3, column 1: expected ',' or ']', but got '<stream end>' (while "
     "parsing a flow sequence from line 2, column 17)"),
    ("x" * 200 + "\n", "<top level>", "got '" + "x" * 75 + " ... (str)"),
]


def test_yaml_merge_keys_are_overridden_not_duplicates(tmp_path):
    """`<<: *anchor` then a key of the anchor's: the explicit one wins, as YAML says (it was
    refused as a key given twice); a --set value is checked for keys given twice too."""
    path = tmp_path / "merge.yaml"
    path.write_text("device: cpu\naxes:\n  - &a {sweep: one, seq_len: [32], head_dim: 16}\n"
                    "  - <<: *a\n    sweep: two\n    seq_len: [64]\n")
    exp = schema.load(path)
    assert [(ax.name, ax.seq_len, ax.head_dim) for ax in exp.sweeps] == [
        ("one", (32,), (16,)), ("two", (64,), (16,))]
    with pytest.raises(schema.SchemaError, match=r"--set: .*the key 'x' is given twice in one "
                                                 r"mapping \(line 1\)"):
        schema.load(path, ["plots=[{x: seq_len, y: tflops, x: head_dim}]"])


@pytest.mark.parametrize("data, path, hint", BAD, ids=[b[1] for b in BAD])
def test_schema_error_names_file_path_and_choices(tmp_path, data, path, hint):
    assert_schema_error(tmp_path, data, path, hint)


SCATTER_REFUSES = [("ratio", {"denominator": "naive"}), ("ratio_panel", {"denominator": "naive"}),
                   ("slope", True), ("identity", True), ("value", ["tflops"])]


@pytest.mark.parametrize("key, value", SCATTER_REFUSES, ids=[k for k, _ in SCATTER_REFUSES])
def test_scatter_refuses_line_and_heatmap_keys(tmp_path, key, value):
    plot = {"x": "tflops", "y": "error_rel", "kind": "scatter", key: value}
    assert_schema_error(tmp_path, {"plots": [plot]}, f"plots[0].{key}", "a scatter plot")
    # the same key on a line plot keeps its meaning (value: its own message, unchanged)
    line = dict(plot, kind="line")
    if key == "value":
        assert_schema_error(tmp_path, {"plots": [line]}, "plots[0].value",
                            "'value' is for kind: heatmap; a line plot draws 'y'")
    else:
        assert schema.build({"plots": [line]}).plots[0].kind == "line"


def test_scatter_plot_spec():
    (p,) = schema.build({"plots": [{"x": "tflops", "y": "error_rel", "kind": "scatter",
                                    "hue": "precision", "style": "method", "col": "pass",
                                    "logx": True, "logy": True, "filter": {"method": "flash"},
                                    "title": "t", "name": "err"}]}).plots
    assert (p.kind, p.x, p.y, p.hue, p.style, p.col) == ("scatter", "tflops", "error_rel",
                                                         "precision", "method", ("pass",))
    assert p.logx and p.logy and p.filter == (("method", ("flash",)),) and p.name == "err"
    assert "scatter" in schema.PLOT_KINDS and "scatter" in schema.__doc__


def test_schema_error_aborts_before_measuring(tmp_path, monkeypatch, capsys):
    calls = FakeMeasure()
    monkeypatch.setattr(runner, "measure_point", calls)
    f = write(tmp_path, dict(TINY, plots=[{"x": "seq_len", "y": "nope"}]))
    out = tmp_path / "out"
    assert cli.main(["run", str(f), "--out", str(out)]) == 2
    assert "plots[0].y" in capsys.readouterr().err
    assert calls.calls == [] and not out.exists()


def test_defaults_and_shorthands(tmp_path):
    exp = schema.load(write(tmp_path, {"axes": {"seq_len": 256}}))
    assert exp.name == "exp" and exp.device == "auto"
    assert [m.name for m in exp.methods] == ["naive", "flash"]
    assert exp.axes.seq_len == (256,) and exp.axes.kv_lens(256) == (256,)
    assert exp.measure.error_limit == 2 ** 24


def test_derived_batch_and_heads():
    exp = schema.build({"device": "cpu", "methods": ["naive"],
                        "axes": {"seq_len": [1024, 4096], "head_dim": [64, 128],
                                 "batch": {"tokens": 16384}, "heads": {"model_dim": 2048}}})
    shapes = {(p.seq_len, p.head_dim, p.batch, p.heads) for p in enumerate_points(exp)}
    assert shapes == {(1024, 64, 16, 32), (1024, 128, 16, 16), (4096, 64, 4, 32),
                      (4096, 128, 4, 16)}


def test_points_order_and_dedup():
    exp = schema.build({"device": "cpu", "axes": {"seq_len": [64, 32], "pass": ["forward", "backward"]},
                        "methods": ["naive", {"name": "flash", "deterministic": [True, False]}]})
    pts = enumerate_points(exp)
    fwd = [p for p in pts if p.pass_ == "forward"]
    bwd = [p for p in pts if p.pass_ == "backward"]
    assert [(p.seq_len, p.method) for p in fwd] == [(32, "naive"), (32, "flash"), (64, "naive"),
                                                     (64, "flash")]
    assert len(bwd) == 6 and {p.deterministic for p in bwd if p.method == "flash"} == {True, False}
    assert all(p.deterministic is None for p in fwd)
    assert all(Point.from_json(p.to_json()) == p for p in pts)


def test_shipped_experiments_validate():
    files = sorted((REPO / "experiments").glob("*.yaml"))
    assert {f.stem for f in files} >= {"memory_vs_length", "tile_ablation", "speed_vs_length",
                                       "cpu_quick", "io_bytes"}
    for f in files:
        assert f.read_text().startswith("# cuflash run experiments/"), f
        exp = schema.load(f, smem_limit=schema.DEFAULT_SMEM_LIMIT)
        assert enumerate_points(exp, "gpu" if exp.device != "cpu" else "cpu")


def test_tile_grid_points_for_precompile():
    pts = schema.tile_grid_points(REPO / "experiments" / "tile_ablation.yaml")
    # forward grid: 10 mma tiles + 5 wgmma tiles + 5 warp-specialized ones, backward grid: 5 mma
    # tiles × 2 dQ modes + 3 wgmma tiles + 3 warp-specialized ones (deterministic only); each at
    # d = 64 and 128
    assert len(pts) == 72 and len(set(pts)) == 72
    assert sum(t.kernel == "wgmma" for _, _, t, *_ in pts) == 32
    assert sum(t.num_warps == 12 for _, _, t, *_ in pts) == 16
    dtype, d, tile, causal, backward, det = pts[0]
    assert (dtype, d, causal, backward, tile.kernel) == ("float16", 64, False, False, "mma")
    io = schema.tile_grid_points(REPO / "experiments" / "io_bytes.yaml")
    assert any(b for *_, b, _ in io) and any(not b for *_, b, _ in io)


# -- --set ----------------------------------------------------------------------------------------------

def test_parse_override():
    assert schema.parse_override("axes.seq_len=[256,512]") == (["axes", "seq_len"], [256, 512])
    assert schema.parse_override("methods[1].grid.block_m=64") == (
        ["methods", 1, "grid", "block_m"], 64)
    assert schema.parse_override("measure.time=false") == (["measure", "time"], False)
    assert schema.parse_override("description=a=b") == (["description"], "a=b")
    for bad in ("axes.seq_len", "axes..x=1", "a[b]=1"):
        with pytest.raises(ValueError, match="--set"):
            schema.parse_override(bad)


def test_apply_overrides_and_load(tmp_path):
    raw = {"methods": ["naive", "flash"], "axes": {"seq_len": [128]}}
    out = schema.apply_overrides(raw, ["axes.seq_len=[256,512]", "methods[1].grid.block_m=[32]",
                                       "measure.repeats=2"])
    assert out["axes"]["seq_len"] == [256, 512] and out["measure"] == {"repeats": 2}
    assert out["methods"][1] == {"name": "flash", "grid": {"block_m": [32]}}
    assert raw["axes"]["seq_len"] == [128]            # the original is untouched
    f = write(tmp_path, dict(TINY))
    exp = schema.load(f, ["axes.seq_len=[8, 4]"])
    assert exp.axes.seq_len == (4, 8)
    with pytest.raises(schema.SchemaError, match=r"with --set axes.seq_len=0\).*axes.seq_len"):
        schema.load(f, ["axes.seq_len=0"])
    with pytest.raises(schema.SchemaError, match=r"methods\[5\] does not exist"):
        schema.load(f, ["methods[5].label=x"])


# -- resume --------------------------------------------------------------------------------------------

def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_resume_measures_only_missing_rows(tmp_path):
    exp = schema.build(TINY, "tiny.yaml")
    out = tmp_path / "res"
    first = FakeMeasure()
    runner.run(exp, out, measure=first, log=lambda s: None, draw=False)
    assert len(first.calls) == 8
    csv_path = out / runner.RESULTS_CSV
    lines = csv_path.read_text().splitlines(keepends=True)
    # interrupted: the last two rows never written, the third-to-last torn mid-line
    csv_path.write_text("".join(lines[:-3]) + lines[-3][:15])
    lost = {tuple(r[c] for c in ("method", "seq_len")) for r in _rows(csv_path)[-0:]}
    second = FakeMeasure()
    summary = runner.run(exp, out, measure=second, log=lambda s: None, draw=False)
    assert [(p.method, p.seq_len) for p in second.calls] == [(p.method, p.seq_len)
                                                             for p in first.calls[-3:]]
    assert summary.skipped == 5
    rows = _rows(csv_path)
    assert len(rows) == 8 and len({(r["method"], r["seq_len"]) for r in rows}) == 8
    assert lost  # rows kept from the first run
    third = FakeMeasure()
    runner.run(exp, out, measure=third, log=lambda s: None, draw=False)
    assert third.calls == []
    env = json.loads((out / "env.json").read_text())
    assert [r["run"] for r in env["runs"]] == [0, 1, 2]
    assert {r["run"] for r in rows} == {"0", "1"}


def test_resume_refuses_a_label_given_to_another_method(tmp_path):
    """A label measured by one method, then given to another: the resume stops before writing
    anything (its rows would have been kept as the new method's, the stored spec renamed)."""
    out = tmp_path / "res"
    runner.run(schema.build(dict(TINY, methods=[{"name": "twin", "label": "A"}]), "t.yaml"), out,
               measure=FakeMeasure(), log=lambda s: None, draw=False)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    again = FakeMeasure()
    with pytest.raises(ValueError, match=r"holds method label 'A' measured by 'twin'; this "
                                         r"experiment gives 'A' to 'naive': use another label"):
        runner.run(schema.build(dict(TINY, methods=[{"name": "naive", "label": "A"}]), "t.yaml"),
                   out, measure=again, log=lambda s: None, draw=False)
    assert again.calls == []
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_resume_retries_error_rows(tmp_path):
    exp = schema.build(TINY)
    out = tmp_path / "res"
    flaky = FakeMeasure(lambda p: NotImplementedError("kernels not landed")
                        if p.method == "twin" and p.seq_len == 32 else None)
    s = runner.run(exp, out, measure=flaky, log=lambda s: None, draw=False)
    assert s.statuses == {"ok": 7, "error": 1}
    row = next(r for r in _rows(out / "results.csv") if r["status"] == "error")
    assert "NotImplementedError: kernels not landed" in row["note"]
    again = FakeMeasure()
    runner.run(exp, out, measure=again, log=lambda s: None, draw=False)
    assert [(p.method, p.seq_len) for p in again.calls] == [("twin", 32)]
    assert [r["status"] for r in _rows(out / "results.csv")] == ["ok"] * 8


# -- OOM as data ---------------------------------------------------------------------------------------

def test_oom_is_a_row_and_larger_sizes_are_skipped(tmp_path):
    exp = schema.build(TINY)
    fake = FakeMeasure(lambda p: MemoryError("cannot allocate")
                       if p.method == "naive" and p.seq_len >= 64 else None)
    out = tmp_path / "res"
    runner.run(exp, out, measure=fake, log=lambda s: None, draw=False)
    rows = {(r["method"], int(r["seq_len"])): r for r in _rows(out / "results.csv")}
    assert rows["naive", 64]["status"] == "oom" and "MemoryError" in rows["naive", 64]["note"]
    assert rows["naive", 128]["status"] == "oom-skipped"
    assert "seq_len=64" in rows["naive", 128]["note"]
    assert all(rows["twin", t]["status"] == "ok" for t in (16, 32, 64, 128))
    assert ("naive", 128) not in [(p.method, p.seq_len) for p in fake.calls]
    assert rows["naive", 128]["pred_bytes"]           # predictions even for skipped points
    # resuming keeps the OOM frontier: nothing is tried again
    again = FakeMeasure()
    runner.run(exp, out, measure=again, log=lambda s: None, draw=False)
    assert again.calls == []


def test_oom_without_skipping_measures_larger_sizes(tmp_path):
    cp = pytest.importorskip("cupy")
    exp = schema.build(dict(TINY, measure={"oom_skip": False}))
    fake = FakeMeasure(lambda p: cp.cuda.memory.OutOfMemoryError(1 << 40, 1 << 30)
                       if p.method == "naive" and p.seq_len == 64 else None)
    out = tmp_path / "res"
    s = runner.run(exp, out, measure=fake, log=lambda s: None, draw=False)
    assert s.statuses == {"ok": 7, "oom": 1}
    assert ("naive", 128) in [(p.method, p.seq_len) for p in fake.calls]


def test_is_oom():
    assert measure.is_oom(MemoryError())
    assert measure.is_oom(RuntimeError("CUDA error: out of memory"))
    assert measure.is_oom(RuntimeError("CUBLAS_STATUS_ALLOC_FAILED"))
    assert not measure.is_oom(ValueError("bad tile"))
    assert measure.classify(measure.Unavailable("no torch")) == ("unavailable", "no torch")
    try:
        import cuflash
        cuflash.attention(1, 2, 3)
    except TypeError as exc:
        status, note = measure.classify(exc)
    assert status == "error" and note.startswith("TypeError: q must be")
    assert note.endswith("in array_module)") and "(at cuflash/_xp.py:" in note


def test_torch_refusal_reasons():
    from cuflash.experiments.torch_sdpa import refusal_reasons
    msgs = ["Memory efficient kernel not used because: (Triggered internally at /a.cpp:915.)",
            "Memory Efficient attention has been runtime disabled. (Triggered internally at /b.cpp:1.)",
            "Flash attention kernel not used because: (Triggered internally at /c.cpp:2.)",
            "Expected query, key and value to all be of dtype: {Half, BFloat16}. Got Query dtype:"
            " float (Triggered internally at /d.cpp:3.)"]
    assert refusal_reasons(msgs) == ("Expected query, key and value to all be of dtype: "
                                     "{Half, BFloat16}. Got Query dtype: float")


def test_torch_without_gpu_is_unavailable(tmp_path):
    exp = schema.build({"device": "cpu", "axes": {"seq_len": 16, "head_dim": 16},
                        "methods": ["naive", {"name": "torch_sdpa", "backends": ["flash"]}],
                        "measure": {"repeats": 1, "warmup": 0}})
    s = runner.run(exp, tmp_path / "r", log=lambda s: None, draw=False)
    rows = _rows(tmp_path / "r" / "results.csv")
    torch_row = next(r for r in rows if r["method"] == "torch_flash")
    assert torch_row["status"] == "unavailable" and torch_row["note"]
    assert s.statuses == {"ok": 1, "unavailable": 1}


# -- real measurements on the CPU ----------------------------------------------------------------------

@pytest.mark.parametrize("method", ["naive", "twin", "flash"])
@pytest.mark.parametrize("pass_", ["forward", "backward", "both"])
def test_measure_point_cpu(method, pass_):
    exp = schema.build({"device": "cpu", "axes": {"seq_len": 40, "kv_len": 24, "head_dim": 16,
                                                  "heads": 2, "dtype": "float32", "pass": pass_,
                                                  "causal": True},
                        "methods": [method], "measure": {"repeats": 2, "warmup": 1}})
    (p,) = enumerate_points(exp)
    row = measure.measure_point(p, exp.measure)
    # CPU: batches of >= 2 calls until three batch medians agree; BLAS pinned to one thread
    assert row["repeats"] >= 2 and 0 < row["time_ms_p20"] <= row["time_ms_median"] <= row["time_ms_p80"]
    assert row["threads"] == 1 and row["time_spread"] >= 0
    assert row["peak_mem_bytes"] > 0
    assert row["error_rel"] < 1e-5
    pred = runner.predicted(p)
    assert pred.bytes_total > 0 and pred.flops > 0


def test_error_skipped_above_limit():
    exp = schema.build({"device": "cpu", "axes": {"seq_len": 32, "head_dim": 16},
                        "methods": ["naive"], "measure": {"repeats": 1, "warmup": 0,
                                                          "error_limit": 100}})
    (p,) = enumerate_points(exp)
    assert "error_rel" not in measure.measure_point(p, exp.measure)


# -- ncu -----------------------------------------------------------------------------------------------

NCU_SAMPLE = """\
==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "cupy_multiply__float_float_float" - 0: 0%....50%....100% - 1 pass
==PROF== Profiling "cuflash_mma_fwd_f16_d64_m128_n64_w4_s2" - 1: 0%....50%....100% - 1 pass
==PROF== Disconnected from process 4242
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3.12","127.0.0.1","cupy_multiply__float_float_float","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","1,048,576"
"0","4242","python3.12","127.0.0.1","cupy_multiply__float_float_float","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_write.sum","byte","524288"
"1","4242","python3.12","127.0.0.1","cuflash_mma_fwd_f16_d64_m128_n64_w4_s2","1","7","(128, 1, 1)","(32, 8, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","Kbyte","2.5"
"1","4242","python3.12","127.0.0.1","cuflash_mma_fwd_f16_d64_m128_n64_w4_s2","1","7","(128, 1, 1)","(32, 8, 1)","0","9.0","Command line profiler metrics","dram__bytes_write.sum","byte","1024"
"""


def test_parse_ncu_csv():
    b = ncu.parse_ncu_csv(NCU_SAMPLE)
    assert b.bytes_read == 1048576 + 2500 and b.bytes_written == 524288 + 1024
    assert b.bytes_total == b.bytes_read + b.bytes_written
    assert b.kernels == ("cupy_multiply__float_float_float",
                         "cuflash_mma_fwd_f16_d64_m128_n64_w4_s2")


def test_parse_ncu_csv_without_table():
    with pytest.raises(ncu.NcuUnavailable, match="no metrics table"):
        ncu.parse_ncu_csv("==PROF== Disconnected from process 1\n")
    with pytest.raises(ncu.NcuUnavailable, match="n/a"):
        ncu.parse_ncu_csv(NCU_SAMPLE.replace('"524288"', '"n/a"'))


def test_ncu_missing_is_a_note(monkeypatch, tmp_path):
    monkeypatch.setattr(ncu, "find_ncu", lambda: None)
    with pytest.raises(ncu.NcuUnavailable, match="hbm_bytes unavailable: ncu not found"):
        ncu.measure_hbm("{}")
    cmd = ncu.command("/x/ncu", '{"a": 1}', "/py")
    assert cmd[:3] == ["/x/ncu", "--clock-control", "none"] and "--csv" in cmd
    assert cmd[-4:] == ["/py", "-m", "cuflash.experiments.one_call", '{"a": 1}']
    # the runner records the note in the row and goes on (faked GPU point)
    p = enumerate_points(schema.build(TINY))[0]
    p = Point(**{**p.__dict__, "device": "gpu"})
    (result,) = runner._measure_hbm_batch([p], schema.Measure(hbm_bytes=True),
                                          ncu.measure_hbm_many)
    row: dict = {}
    runner._apply_hbm(row, result)
    assert row == {"note": "hbm_bytes unavailable: ncu not found"}
    fake = ncu.parse_ncu_csv(NCU_SAMPLE)
    row = {"time_ms_median": 1.0}
    runner._add_predictions(row, p)
    (result,) = runner._measure_hbm_batch([p], schema.Measure(hbm_bytes=True),
                                          lambda js, t: [fake for _ in js])
    runner._apply_hbm(row, result)
    assert row["hbm_bytes"] == fake.bytes_total and row["hbm_kernels"] == 2
    assert row["hbm_pred_ratio"] == pytest.approx(fake.bytes_total / row["pred_bytes"])
    assert row["hbm_gbps"] == pytest.approx(fake.bytes_total / 1e-3 / 1e9)


# -- plots from a CSV alone ----------------------------------------------------------------------------

def test_plot_from_csv_alone(tmp_path, capsys):
    plots = [
        {"x": "seq_len", "y": "peak_mem_bytes", "logx": True, "logy": True, "col": "pass"},
        {"x": "seq_len", "y": "time_ms_median", "ratio": {"numerator": "naive"}, "logx": True},
        {"x": "block_n", "y": "block_m", "kind": "heatmap",
         "value": ["time_ms_median", "pred_bytes"], "col": "head_dim",
         "filter": {"method": "twin", "seq_len": 64, "pass": "forward"}, "name": "heat"},
    ]
    data = {"device": "cpu", "axes": {"seq_len": [16, 32, 64, 128], "head_dim": [16, 32],
                                      "pass": ["forward", "backward"]},
            "methods": ["naive", {"name": "twin", "grid": {"block_m": [16, 32],
                                                           "block_n": [16, 32]}}],
            "plots": plots}
    exp = schema.build(data, "p.yaml")
    src = tmp_path / "run"
    fake = FakeMeasure(lambda p: MemoryError() if p.method == "naive" and p.seq_len == 128 else None)
    runner.run(exp, src, measure=fake, log=lambda s: None, draw=False)
    # only the CSV and the stored spec travel
    dst = tmp_path / "copy"
    dst.mkdir()
    for name in ("results.csv", "experiment.yaml"):
        (dst / name).write_bytes((src / name).read_bytes())
    assert cli.main(["plot", str(dst / "results.csv")]) == 0
    pngs = sorted(dst.glob("*.png"))
    assert [p.name for p in pngs] == ["00_peak_mem_bytes_vs_seq_len.png",
                                      "01_time_ms_median_vs_seq_len_ratio_naive.png", "heat.png"]
    assert all(p.stat().st_size > 5000 and p.read_bytes()[:4] == b"\x89PNG" for p in pngs)
    # --config draws another experiment's plots from the same CSV
    other = write(tmp_path, dict(data, plots=[{"x": "seq_len", "y": "tflops", "name": "t"}]),
                  "other.yaml")
    assert cli.main(["plot", str(dst / "results.csv"), "--config", str(other),
                     "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "t.png").stat().st_size > 5000
    # an experiment whose plots read columns this CSV lacks, or whose filter keeps no row: those
    # plots are named on stderr and not drawn (no empty PNG), the others are, the status says so
    unrelated = write(tmp_path, dict(data, plots=[
        {"x": "seq_len", "y": "tflops", "name": "fits"},
        {"x": "window", "y": "time_spread", "name": "cols"},
        {"x": "seq_len", "y": "tflops", "filter": {"method": "twin", "head_dim": 16},
         "col": "pass", "name": "rows"}]), "unrelated.yaml")
    (tmp_path / "u").mkdir()
    with open(dst / "results.csv", newline="") as f:
        data16 = [r for r in csv.DictReader(f) if r["head_dim"] != "16"]
    with open(tmp_path / "u" / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(data16[0]))
        w.writeheader()
        w.writerows(data16)
    assert cli.main(["plot", str(tmp_path / "u" / "results.csv"), "--config", str(unrelated)]) == 1
    err = capsys.readouterr().err
    assert "plot cols (time_spread vs window) not drawn: no row has a value of 'window', " \
        "'time_spread'" in err
    assert "plot rows (tflops vs seq_len) not drawn: no row passes its filter" in err
    assert "plot fits" not in err
    assert sorted(p.name for p in (tmp_path / "u").glob("*.png")) == ["fits.png"]


def _drawn_figures(monkeypatch) -> list:
    """Every matplotlib Figure saved from now on (the plots draw on Agg Figures, not pyplot)."""
    from matplotlib.figure import Figure
    figs, save = [], Figure.savefig

    def record(self, *args, **kwargs):
        figs.append(self)
        return save(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    return figs


def test_scatter_plot_from_csv(tmp_path, monkeypatch):
    """kind: scatter draws one marker per ok row (no line through them), colour by hue, marker by
    style, facets by col; OOM and unavailable rows are not points but are counted in a note."""
    from matplotlib.collections import PathCollection
    from matplotlib.colors import to_hex
    plot = {"kind": "scatter", "x": "tflops", "y": "error_rel", "hue": "method",
            "style": "causal", "col": "pass", "logx": True, "logy": True, "name": "err_speed"}
    data = {"device": "cpu", "axes": {"seq_len": [16, 32, 64, 128], "head_dim": 16, "heads": 2,
                                      "dtype": "float32", "causal": [False, True],
                                      "pass": ["forward", "backward"]},
            "methods": ["naive", "twin", {"name": "torch_sdpa", "backends": ["flash"]}],
            "measure": {"repeats": 1, "warmup": 0}, "plots": [plot]}
    exp = schema.build(data, "s.yaml")
    fake = FakeMeasure(lambda p: MemoryError() if p.method == "naive" and p.seq_len == 128
                       else measure.Unavailable("no torch") if p.method == "torch_flash"
                       else None)

    def with_error(p, cfg):
        row = fake(p, cfg)
        return dict(row, error_rel=(3e-6 if p.method == "naive" else 1e-7) * p.seq_len)

    src = tmp_path / "run"
    runner.run(exp, src, measure=with_error, log=lambda s: None, draw=False)
    statuses = [r["status"] for r in _rows(src / "results.csv")]
    assert statuses.count("ok") == 28 and statuses.count("oom") == 4
    assert statuses.count("unavailable") == 16
    figs = _drawn_figures(monkeypatch)
    assert cli.main(["plot", str(src / "results.csv")]) == 0
    png = src / "err_speed.png"
    assert png.stat().st_size > 5000 and png.read_bytes()[:4] == b"\x89PNG"
    (fig,) = figs
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["pass=forward", "pass=backward"]
    rows = results.read_rows(src / "results.csv")
    for ax, pass_ in zip(axes, ("forward", "backward")):
        # nothing joins the points: no line of more than one point
        assert all(len(line.get_xdata()) <= 1 for line in ax.get_lines())
        colls = [c for c in ax.collections if isinstance(c, PathCollection)]
        by_label = {c.get_label(): c for c in colls}
        # one collection per (method, causal): naive lost its OOM size, torch_flash never ran
        assert sorted((k, len(c.get_offsets())) for k, c in by_label.items()) == [
            ("naive False", 3), ("naive True", 3), ("twin False", 4), ("twin True", 4)]
        # hue: one colour per method, two methods two colours
        colour = {k: to_hex(c.get_facecolor()[0]) for k, c in by_label.items()}
        assert colour["naive False"] == colour["naive True"] != colour["twin False"]
        assert colour["twin False"] == colour["twin True"]
        # style: one marker per causal value
        def marker(k):
            return by_label[k].get_paths()[0].vertices.round(6).tolist()
        assert marker("naive False") == marker("twin False") != marker("naive True")
        # the points are the rows' values
        twin = sorted(tuple(map(float, xy)) for xy in by_label["twin False"].get_offsets())
        want = sorted((r["tflops"], r["error_rel"]) for r in rows if r["method"] == "twin"
                      and r["pass"] == pass_ and r["causal"] is False)
        assert sum(twin, ()) == pytest.approx(sum(want, ()))
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        assert sorted(ax.get_legend_handles_labels()[1]) == sorted(by_label)
        assert ax.get_legend() is not None
        notes = [t.get_text() for t in ax.texts]
        assert "not drawn: 2 oom, 8 unavailable" in notes, notes
    assert "error" in fig._suptitle.get_text() and "throughput" in fig._suptitle.get_text()


def test_scatter_of_failed_rows_only(tmp_path, monkeypatch):
    """A scatter whose rows all failed is drawn (an empty panel saying so), not a crash."""
    from matplotlib.collections import PathCollection
    from cuflash.experiments import plots
    rows = [{"method": "naive", "seq_len": t, "pass": "forward", "status": "oom",
             "tflops": None, "error_rel": None} for t in (16, 32)]
    rows.append({"method": "twin", "seq_len": 16, "pass": "forward", "status": "ok",
                 "tflops": 0.5, "error_rel": None})
    plot = schema.Plot(x="tflops", y="error_rel", kind="scatter", logy=True)
    figs = _drawn_figures(monkeypatch)
    # draw_all skips it, saying why (as `cuflash plot` and `cuflash run` do); drawn alone, the
    # panel says what the rows hold
    assert plots.draw_all(rows, [plot], tmp_path, where="r.csv") == (
        [], ["plot 0 (error_rel vs tflops) not drawn: no row has a value of 'error_rel' (r.csv)"])
    path = plots.draw_line(rows, plot, tmp_path / "00_error_rel_vs_tflops.png")
    assert path.stat().st_size > 2000
    (ax,) = figs[0].axes
    assert not [c for c in ax.collections if isinstance(c, PathCollection)]
    assert {t.get_text() for t in ax.texts} == {"no successful measurements",
                                                 "not drawn: 1 no error_rel, 2 oom"}


def test_plot_missing_spec_is_a_clear_error(tmp_path, capsys):
    runner.run(schema.build(TINY), tmp_path, measure=FakeMeasure(), log=lambda s: None,
               draw=False)
    (tmp_path / runner.SPEC_YAML).unlink()
    assert cli.main(["plot", str(tmp_path / "results.csv")]) == 2
    assert "--config" in capsys.readouterr().err


def test_read_rows_types(tmp_path):
    exp = schema.build(TINY)
    runner.run(exp, tmp_path, measure=FakeMeasure(), log=lambda s: None, draw=False)
    row = results.read_rows(tmp_path / "results.csv")[0]
    assert row["seq_len"] == 16 and row["causal"] is False and isinstance(row["tflops"], float)
    assert row["status"] == "ok" and row["backend"] is None


# -- CLI -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cmd", ["run", "plot", "demo", "compile"])
def test_help(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([cmd, "--help"])
    assert e.value.code == 0 and "usage: cuflash " + cmd in capsys.readouterr().out


def test_compile_dispatches(monkeypatch):
    seen = []
    fake = types.ModuleType("cuflash.gpu.precompile")
    fake.main = lambda argv: seen.append(argv) or 3
    monkeypatch.setitem(sys.modules, "cuflash.gpu.precompile", fake)
    import cuflash.gpu
    monkeypatch.setattr(cuflash.gpu, "precompile", fake, raising=False)
    assert cli.main(["compile", "--arch", "sm_90", "--fail-on-spills"]) == 3
    assert seen == [["--arch", "sm_90", "--fail-on-spills"]]


def test_unknown_experiment_name(capsys):
    assert cli.main(["run", "no_such_experiment"]) == 2
    err = capsys.readouterr().err
    assert "cpu_quick" in err and "no_such_experiment" in err


def test_cpu_quick_end_to_end(tmp_path, capsys):
    out = tmp_path / "q"
    assert cli.main(["run", "cpu_quick", "--out", str(out), "--set", "axes.seq_len=[32,64]",
                     "--set", "measure.repeats=2"]) == 0
    text = capsys.readouterr().out
    rows = results.read_rows(out / "results.csv")
    assert len(rows) == 8 and {r["status"] for r in rows} == {"ok"}
    assert all(r["error_rel"] < 1e-5 and r["peak_mem_bytes"] > 0 for r in rows)
    assert (out / "memory_vs_T.png").stat().st_size > 5000 and "plot:" in text
    env = json.loads((out / "env.json").read_text())["runs"][0]
    assert env["device"] == "cpu" and env["numpy_version"] and env["hostname"]
    stored = yaml.safe_load((out / "experiment.yaml").read_text())
    assert stored["axes"]["seq_len"] == [32, 64] and stored["name"] == "cpu_quick"
    table = demo.table(rows)
    assert "naive peak" in table and "twin peak" in table and len(table.splitlines()) == 7


@pytest.mark.parametrize("lo,hi,want", [(20.0, 500.0, {"20", "50", "200", "500"}),
                                        (6.0, 700.0, set()), (2.0, 9.0, None)])
def test_log_axis_minor_labels_do_not_crowd(lo, hi, want):
    """A log axis over one to two decades labels its minor ticks at 2 and 5 only (matplotlib
    would label 3, 4, 6, ... too, and they overlap); over more decades none; under one decade
    matplotlib's own labels stay (want None: not checked beyond drawing)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from cuflash.experiments import plots
    fig, ax = plt.subplots()
    ax.scatter([lo, hi], [1.0, 2.0])
    plots._format_axis(ax, "x", "tflops", True, [lo, hi])
    fig.canvas.draw()
    minor = {t.get_text() for t in ax.xaxis.get_minorticklabels() if t.get_text()}
    lo_shown, hi_shown = ax.get_xlim()
    majors = [t for t in ax.xaxis.get_majorticklocs() if lo_shown <= t <= hi_shown]
    plt.close(fig)
    if want is not None:
        assert majors, "the decades stay labelled"
        assert minor == want, minor
