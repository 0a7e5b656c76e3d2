"""Edges of the experiment runner and the ``cuflash`` command: results are never lost, CPU timings
are pinned and repeated until stable, titles and the demo say only what the rows show, and bad
arguments are one-line errors (exit 2) that write nothing. CPU only; measurements are faked
unless the test is about them."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest
import yaml

import cuflash
from cuflash import _xp, cli
from cuflash.experiments import env as envmod
from cuflash.experiments import measure, results, runner, schema
from cuflash.experiments.points import enumerate_points

from test_experiments import TINY, FakeMeasure, assert_host_bound, write

REPO = Path(__file__).resolve().parents[1]


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _quiet(*_):
    pass


# -- results are never lost -----------------------------------------------------------------------

def test_cpu_point_that_cannot_fit_is_an_oom_row_and_is_not_run(tmp_path, monkeypatch):
    from cuflash.experiments import hostmem
    monkeypatch.setattr(hostmem, "available_bytes", lambda: 1 << 30)
    exp = schema.build(dict(TINY, axes=dict(TINY["axes"], seq_len=[16, 32, 16384, 32768])))
    fake = FakeMeasure()
    out = tmp_path / "r"
    runner.run(exp, out, measure=fake, log=_quiet, draw=False)
    rows = {(r["method"], int(r["seq_len"])): r for r in _rows(out / "results.csv")}
    assert rows["naive", 16384]["status"] == "oom"
    assert "host memory" in rows["naive", 16384]["note"] and "1.07 GB" in rows["naive", 16384]["note"]
    assert rows["naive", 32768]["status"] == "oom-skipped"
    assert all(rows["twin", t]["status"] == "ok" for t in (16, 32, 16384, 32768))
    assert ("naive", 16384) not in [(p.method, p.seq_len) for p in fake.calls]
    again = FakeMeasure()                      # a rerun goes past it
    runner.run(exp, out, measure=again, log=_quiet, draw=False)
    assert again.calls == []


KILLER = """
import os, signal, sys
from cuflash.experiments import runner, schema
exp = schema.build({tiny!r})
def measure(p, cfg):
    if p.method == "naive" and p.seq_len == 64:
        os.kill(os.getpid(), signal.SIGKILL)   # what the OS does to a process out of memory
    return {{"repeats": 1, "time_ms_median": 1.0, "peak_mem_bytes": 1}}
runner.run(exp, sys.argv[1], measure=measure, log=lambda s: None, draw=False)
"""


def test_a_point_the_os_killed_is_an_oom_row_on_the_rerun(tmp_path):
    out = tmp_path / "r"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO)] + sys.path))
    proc = subprocess.run([sys.executable, "-c", KILLER.format(tiny=TINY), str(out)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    measured_before = {(r["method"], r["seq_len"]) for r in _rows(out / "results.csv")}
    assert measured_before == {("naive", "16"), ("twin", "16"), ("naive", "32"), ("twin", "32")}
    again = FakeMeasure()
    logs = []
    runner.run(schema.build(TINY), out, measure=again, log=logs.append, draw=False)
    called = [(p.method, p.seq_len) for p in again.calls]
    assert ("naive", 64) not in called and ("naive", 128) not in called
    assert sorted(called) == [("twin", 64), ("twin", 128)]
    rows = {(r["method"], int(r["seq_len"])): r for r in _rows(out / "results.csv")}
    assert len(rows) == 8
    assert rows["naive", 64]["status"] == "oom" and "killed" in rows["naive", 64]["note"]
    assert rows["naive", 128]["status"] == "oom-skipped"
    assert any("killed" in line for line in logs)
    assert not (out / runner.MEASURING_JSON).exists()


TERMINATOR = """
import os, signal, sys
from cuflash.experiments import runner, schema
exp = schema.build({tiny!r})
before = signal.getsignal(signal.SIGTERM)
def measure(p, cfg):
    if p.method == "naive" and p.seq_len == 64:
        os.kill(os.getpid(), signal.SIGTERM)   # timeout, kill, a scheduler's preemption
    return {{"repeats": 1, "time_ms_median": 1.0, "peak_mem_bytes": 1}}
try:
    runner.run(exp, sys.argv[1], measure=measure, log=lambda s: None, draw=False)
except KeyboardInterrupt as exc:
    assert signal.getsignal(signal.SIGTERM) is before, "the handler was not put back"
    print("interrupted:", exc)
    sys.exit(130)
"""


def test_sigterm_stops_the_run_as_ctrl_c_and_the_rerun_measures_the_point(tmp_path):
    """SIGTERM is an interruption, not a kill by the OS: before, the process died in the point,
    which stayed in measuring.json, and the rerun recorded it as 'oom' for good."""
    out = tmp_path / "r"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO)] + sys.path))
    proc = subprocess.run([sys.executable, "-c", TERMINATOR.format(tiny=TINY), str(out)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130 and "interrupted: signal SIGTERM" in proc.stdout, \
        (proc.returncode, proc.stderr)
    assert not (out / runner.MEASURING_JSON).exists()
    assert len(_rows(out / "results.csv")) == 4                # the points before it kept
    again = FakeMeasure()
    runner.run(schema.build(TINY), out, measure=again, log=_quiet, draw=False)
    assert sorted((p.method, p.seq_len) for p in again.calls) == [
        ("naive", 64), ("naive", 128), ("twin", 64), ("twin", 128)]
    assert {r["status"] for r in _rows(out / "results.csv")} == {"ok"}


def test_a_resume_sets_aside_rows_it_cannot_read_and_keys_a_resaved_csv(tmp_path):
    """Rows a resume cannot read (a torn line, an unknown status) were deleted by its rewrite:
    now they go to set_aside.csv with the reason; error rows of points the experiment no longer
    has stay in results.csv (only this experiment's errors are measured again); and a CSV
    re-saved by a spreadsheet (FALSE, 16.0) still names the points it measured."""
    out = tmp_path / "r"
    exp = schema.build(dict(TINY, axes=dict(TINY["axes"], seq_len=[16, 32, 64])))
    fail = FakeMeasure(fail=lambda p: RuntimeError("boom") if p.seq_len == 64 else None)
    runner.run(exp, out, measure=fail, log=_quiet, draw=False)
    lines = (out / "results.csv").read_text().splitlines()
    header = lines[0].split(",")
    status, seq = header.index("status"), header.index("seq_len")
    cells = [line.split(",") for line in lines[1:]]
    t16 = [c for c in cells if c[seq] == "16"]
    t16[0][status] = "OK"            # an unknown status
    torn = ",".join(t16[1][:-3])     # a torn line
    rest = [",".join(c).replace(",false,", ",FALSE,").replace(",16,", ",16.0,")
            for c in cells if c[seq] != "16"]
    (out / "results.csv").write_text("\n".join([lines[0], ",".join(t16[0]), torn] + rest) + "\n")
    logged = []
    again = FakeMeasure()
    runner.run(schema.build(dict(TINY, axes=dict(TINY["axes"], seq_len=[16, 32]))), out,
               measure=again, log=logged.append, draw=False)
    # T = 16 measured again (its rows were unreadable), T = 32 recognised, T = 64's errors kept
    assert sorted(p.seq_len for p in again.calls) == [16, 16]
    rows = _rows(out / "results.csv")
    assert sorted((r["seq_len"], r["status"]) for r in rows) == sorted(
        [("16", "ok")] * 2 + [("32", "ok")] * 2 + [("64", "error")] * 2)
    aside = _rows(out / runner.SET_ASIDE_CSV)
    assert [r["set_aside_why"] for r in aside] == ["torn: too few or too many cells",
                                                   "unknown status 'OK'"]
    assert aside[1]["status"] == "OK" and aside[0]["method"] == t16[1][header.index("method")]
    assert any("moved to" in line and "set_aside.csv" in line for line in logged)


@pytest.mark.parametrize("plot,where,value", [
    ({"filter": {"heads": 7}}, "filter.heads", "7"),
    ({"filter": {"batch": [1, 0]}}, "filter.batch", "0"),
    ({"filter": {"status": "okk"}}, "filter.status", "'okk'"),
    ({"ratio": {"numerator": {"dtype": "float99"}}}, "ratio.numerator.dtype", "'float99'"),
], ids=["heads", "batch", "status", "ratio-baseline"])
def test_a_plot_that_would_be_empty_stops_the_run_before_measuring(plot, where, value,
                                                                   tmp_path):
    """Plot filter and ratio-baseline values no point of the experiment has were taken, and the
    plot came out empty after the whole run: now a schema error naming the key, before anything
    is measured or written (and from --dry-run)."""
    exp = schema.build(dict(TINY, plots=[dict(x="seq_len", y="time_ms_median", **plot)]))
    fake = FakeMeasure()
    with pytest.raises(schema.SchemaError, match=rf"plots\[0\]\.{where}: {value} is not a value "
                                                 rf"of \w+ in any point of this experiment"):
        runner.run(exp, tmp_path / "r", measure=fake, log=_quiet)
    assert fake.calls == [] and not (tmp_path / "r" / "results.csv").exists()
    good = dict(TINY, plots=[dict(x="seq_len", y="time_ms_median", filter={"heads": 2})])
    runner.check_plots(schema.build(good), enumerate_points(schema.build(good)))


def test_run_draws_no_empty_plot_and_a_failing_plot_stops_no_other(tmp_path, monkeypatch):
    """`cuflash run` drew an empty PNG where `cuflash plot` refused (every row failed), and one
    plot's failure stopped the plots after it: each is now said, and the others drawn."""
    from cuflash.experiments import plots
    exp = schema.build(dict(TINY, plots=[
        dict(x="seq_len", y="time_ms_median", name="a", filter={"method": "naive"}),
        dict(x="seq_len", y="time_ms_median", name="b"),
        dict(x="seq_len", y="time_ms_median", name="c")]))
    failing = FakeMeasure(fail=lambda p: RuntimeError("boom") if p.method == "naive" else None)
    real = plots.draw_line
    monkeypatch.setattr(plots, "draw_line", lambda rows, plot, path, env=None: (
        (_ for _ in ()).throw(ValueError("bad axis")) if plot.name == "b"
        else real(rows, plot, path, env)))
    logged = []
    summary = runner.run(exp, tmp_path / "r", measure=failing, log=logged.append)
    assert [p.name for p in summary.plots] == ["c.png"]
    assert "plot a (time_ms_median vs seq_len) not drawn: no row has a value of " \
           "'time_ms_median'" in summary.plot_error
    assert "plot b (time_ms_median vs seq_len) failed: ValueError: bad axis" in summary.plot_error
    assert not (tmp_path / "r" / "a.png").exists()
    assert any(line.startswith("redraw with: cuflash plot") for line in logged)


def test_needed_bytes_bounds_the_measured_peak():
    """hostmem.needed_bytes is an upper bound on what a CPU point allocates (inputs + tracemalloc
    peak, oracle included), and for naive not more than 4x it."""
    from cuflash.experiments import hostmem
    for dtype in ("float32", "float16", "float64"):
        exp = schema.build({"device": "cpu", "methods": ["naive", "twin"],
                            "axes": {"seq_len": 192, "kv_len": ["seq_len", 96], "heads": 2,
                                     "head_dim": 64, "dtype": dtype, "causal": [False, True],
                                     "pass": ["forward", "backward"]}})
        for p in enumerate_points(exp):
            used = assert_host_bound(p, exp.measure.error_limit)
            if p.method == "naive":
                no_oracle = hostmem.needed_bytes(p, False) - hostmem.SLACK_BYTES
                assert no_oracle <= 4 * used, (p.describe(), no_oracle, used)


def test_available_bytes_is_positive():
    from cuflash.experiments import hostmem
    room = hostmem.available_bytes()
    assert room is None or room > 0


def test_second_run_into_a_folder_in_use_stops_and_the_first_keeps_its_rows(tmp_path, capsys):
    out = tmp_path / "r"
    started, release = threading.Event(), threading.Event()

    def slow(p):
        if p.method == "twin" and p.seq_len == 32:
            started.set()
            assert release.wait(60)

    first = FakeMeasure(slow)
    summary = {}
    worker = threading.Thread(target=lambda: summary.update(s=runner.run(
        schema.build(TINY), out, measure=first, log=_quiet, draw=False)))
    worker.start()
    try:
        assert started.wait(60)
        f = write(tmp_path, TINY)
        assert cli.main(["run", str(f), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "in use by another cuflash run" in err and str(out) in err
        assert len(err.strip().splitlines()) == 1
    finally:
        release.set()
        worker.join(60)
    assert summary["s"].statuses == {"ok": 8}
    rows = _rows(out / "results.csv")
    assert len(rows) == 8 and {r["run"] for r in rows} == {"0"}
    assert len(json.loads((out / "env.json").read_text())["runs"]) == 1


def test_writers_never_share_a_temp_file(tmp_path):
    """env.json and results.csv are replaced through temp files of unique names: writers racing
    on one folder do not crash on each other's temp file (and leave none behind)."""
    errors = []

    def hammer(i):
        try:
            for _ in range(100):
                envmod.record(tmp_path, "x", {"who": i}, _quiet)
                results.Writer(tmp_path / "results.csv", [], rewrite=True).close()
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))


def test_corrupt_env_json_is_kept_aside_and_said(tmp_path):
    (tmp_path / "env.json").write_text('{"experiment": "x", "runs": [{"run": 0}, ')
    logs = []
    runner.run(schema.build(TINY), tmp_path, measure=FakeMeasure(), log=logs.append, draw=False)
    (aside,) = tmp_path.glob("env.json.unreadable-*")
    assert aside.read_text() == '{"experiment": "x", "runs": [{"run": 0}, '
    assert any(aside.name in line and "could not be read" in line for line in logs)
    assert [r["run"] for r in json.loads((tmp_path / "env.json").read_text())["runs"]] == [0]


def test_a_foreign_results_csv_is_not_overwritten(tmp_path, capsys):
    (tmp_path / "results.csv").write_text("a,b\n1,2\n")
    fake = FakeMeasure()
    with pytest.raises(ValueError, match="not a cuflash results CSV"):
        runner.run(schema.build(TINY), tmp_path, measure=fake, log=_quiet, draw=False)
    assert fake.calls == [] and (tmp_path / "results.csv").read_text() == "a,b\n1,2\n"


# -- honest numbers --------------------------------------------------------------------------------

def test_cpu_points_pin_blas_threads_and_record_them(tmp_path, monkeypatch):
    from threadpoolctl import threadpool_info
    seen = []

    def fake_call(point, inputs):
        def fn():
            seen.append({lib["num_threads"] for lib in threadpool_info()
                         if lib["user_api"] == "blas"})
            return np.zeros(1)
        return measure.Call(fn, "cpu", lambda r: (r,))

    # recorded in the CSV and in env.json
    exp = schema.build(dict(TINY, measure={"repeats": 1, "warmup": 0, "threads": 1}))
    runner.run(exp, tmp_path, log=_quiet, draw=False)
    assert {r["threads"] for r in _rows(tmp_path / "results.csv")} == {"1"}
    env = json.loads((tmp_path / "env.json").read_text())["runs"][0]
    assert env["blas_threads_pinned"] == 1 and isinstance(env["blas"], list)
    # in effect while the measured call runs, and only then
    outside = {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}
    monkeypatch.setattr(measure, "build_call", fake_call)
    cfg = schema.Measure(repeats=2, warmup=1, memory=False, error=False, threads=1,
                         max_seconds=0.5)
    (p,) = enumerate_points(schema.build({"device": "cpu", "methods": ["naive"],
                                          "axes": {"seq_len": 16, "head_dim": 16}}))
    row = measure.measure_point(p, cfg)
    assert row["threads"] == 1 and seen and all(s <= {1} for s in seen)
    assert {lib["num_threads"] for lib in threadpool_info()
            if lib["user_api"] == "blas"} == outside


class FakeClock:
    """A clock that moves only when the timed function runs, by scripted durations."""

    def __init__(self, durations):
        self.now, self.durations, self.calls = 0.0, iter(durations), 0

    def __call__(self):
        return self.now

    def fn(self):
        self.calls += 1
        self.now += next(self.durations)


def test_cpu_timing_repeats_until_the_batch_medians_agree():
    # noisy first (alternating 10 ms and 30 ms batches), then steady at 10 ms
    durations = [0.010] * 4 + [0.030] * 4 + [0.010] * 4 + [0.030] * 4 + [0.010] * 1000
    clock = FakeClock(durations)
    times, spread = measure.time_until_stable(clock.fn, 2, 0, 100.0, 0.05, clock=clock)
    assert spread is not None and spread <= 0.05
    assert np.median(times) == pytest.approx(10.0)
    assert clock.calls == 16 + 3 * 2                     # stopped as soon as three batches agreed
    # never steady: stops at max_seconds with the spread it saw
    clock = FakeClock([0.010, 0.010, 0.030] * 10000)     # batch medians 10, 30, 10, 30 ms
    times, spread = measure.time_until_stable(clock.fn, 1, 0, 2.0, 0.05, clock=clock)
    assert spread > 0.5 and 2.0 <= clock.now < 2.1


def test_cpu_rounds_keep_the_least_disturbed_timing(tmp_path):
    exp = schema.build(dict(TINY, measure={"repeats": 1, "warmup": 0, "rounds": 3}))
    first = FakeMeasure()
    again = []

    def retime(p, cfg):                      # round 2 twice as fast as round 1, round 3 slower
        again.append(p)
        t = first(p, cfg)["time_ms_median"] * (0.5 if again.count(p) == 1 else 1.5)
        return {"repeats": 1, "time_ms_median": t, "time_ms_min": t, "time_ms_p20": t,
                "time_ms_p80": t, "time_spread": 0.0, "threads": 1}
    logs = []
    runner.run(exp, tmp_path, measure=first, retime=retime, log=logs.append, draw=False)
    assert len(again) == 2 * 8 and sum("timing round" in line for line in logs) == 2
    for r in results.read_rows(tmp_path / "results.csv"):
        t1 = 1e-3 * r["seq_len"] * (r["seq_len"] if r["method"] == "naive" else 1)
        assert r["time_ms_median"] == pytest.approx(0.5 * t1, rel=1e-5)
        assert r["time_rounds"] == 3 and r["time_rounds_spread"] == pytest.approx(2.0)
        assert r["tflops"] == pytest.approx(r["flops"] / (r["time_ms_median"] * 1e-3) / 1e12,
                                            rel=1e-4)


def test_a_run_stopped_before_its_rounds_gets_them_on_the_rerun(tmp_path):
    """measure.rounds: the extra rounds come after every point; a run stopped there left each row
    with its first round, and the rerun found nothing new to do (one-round and best-of-three
    timings mixed in one plot). Now the rerun times those rows again."""
    exp = schema.build(dict(TINY, measure={"repeats": 1, "warmup": 0, "rounds": 3}))
    first = FakeMeasure()

    def stop(p, cfg):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        runner.run(exp, tmp_path, measure=first, retime=stop, log=_quiet, draw=False)
    assert {r["time_rounds"] for r in _rows(tmp_path / "results.csv")} <= {"", "1"}
    again = []

    def retime(p, cfg):                      # every later round twice as fast
        again.append(p)
        t = 0.5 * FakeMeasure()(p, cfg)["time_ms_median"]
        return {"repeats": 1, "time_ms_median": t, "time_ms_min": t, "time_ms_p20": t,
                "time_ms_p80": t, "time_spread": 0.0, "threads": 1}
    logs, none = [], FakeMeasure()
    runner.run(exp, tmp_path, measure=none, retime=retime, log=logs.append, draw=False)
    assert none.calls == [] and len(again) == 2 * 8
    assert any("8 rows of an earlier run timed once" in line for line in logs)
    for r in results.read_rows(tmp_path / "results.csv"):
        t1 = 1e-3 * r["seq_len"] * (r["seq_len"] if r["method"] == "naive" else 1)
        assert r["time_rounds"] == 3 and r["time_ms_median"] == pytest.approx(0.5 * t1, rel=1e-5)
    again.clear()                             # a third run: nothing left to time
    runner.run(exp, tmp_path, measure=none, retime=retime, log=_quiet, draw=False)
    assert again == []


def test_unstable_timing_is_said_in_the_note(tmp_path):
    fake = FakeMeasure()
    base = fake.__call__

    def unstable(p, cfg):
        return dict(base(p, cfg), time_spread=0.5)
    runner.run(schema.build(TINY), tmp_path, measure=unstable, log=_quiet, draw=False)
    assert all("time not stable" in r["note"] for r in _rows(tmp_path / "results.csv"))


def _demo_rows(twin_time):
    rows = []
    for T in (128, 256, 512, 1024):
        for method, mem, ms in (("naive", 4 * T * T, 1e-5 * T * T),
                                ("twin", 100 * T, twin_time(T))):
            rows.append({"method": method, "pass": "forward", "seq_len": T, "status": "ok",
                         "peak_mem_bytes": mem, "time_ms_median": ms, "threads": 1})
    return rows


def test_demo_says_what_the_rows_show():
    from cuflash.experiments import demo
    slower = demo.report(_demo_rows(lambda T: 3e-5 * T * T))
    assert "naive 2.00" in slower and "twin 1.00" in slower
    assert "slower than naive at every" in slower and "3x naive's time" in slower
    assert "faster" not in slower and "BLAS pinned to 1 thread" in slower
    rounds = demo.findings([dict(r, time_rounds=5, time_rounds_spread=0.1 * i)
                            for i, r in enumerate(_demo_rows(lambda T: 3e-5 * T * T))])
    assert any("lowest median of 5 timing rounds" in s and "up to 70%" in s for s in rounds)
    faster = demo.report(_demo_rows(lambda T: 5e-6 * T * T))
    assert "faster than naive at every" in faster and "slower" not in faster
    mixed = demo.findings(_demo_rows(lambda T: 1e-5 * T * 256))
    assert any("faster than naive at forward T=512, forward T=1024" in s for s in mixed)


def test_plot_titles_assert_nothing_and_say_what_is_fitted():
    from cuflash.experiments.plots import title_of
    for f in sorted((REPO / "experiments").glob("*.yaml")):
        for plot in schema.load(f, smem_limit=schema.DEFAULT_SMEM_LIMIT).plots:
            for claim in ("grows as", "runs out", "linear", "quadratic"):
                assert claim not in plot.title, (f.name, plot.title)
    loglog = schema.Plot(x="seq_len", y="peak_mem_bytes", logx=True, logy=True, title="Peak")
    assert title_of(loglog, []) == "Peak; legend: least-squares slope of log y on log x"


def test_auto_titles_name_the_fixed_settings(tmp_path):
    from cuflash.experiments.plots import title_of
    runner.run(schema.build(TINY), tmp_path, measure=FakeMeasure(), log=_quiet, draw=False)
    rows = results.read_rows(tmp_path / "results.csv")
    title = title_of(schema.Plot(x="seq_len", y="time_ms_median"), rows)
    assert title.startswith("time (ms, median) vs sequence length T (")
    for part in ("d=16", "heads=2", "batch=1", "float32", "causal=False", "cpu ("):
        assert part in title, title
    # a column the plot varies is not a fixed setting
    assert "d=16" not in title_of(schema.Plot(x="seq_len", y="time_ms_median",
                                              col=("head_dim",)), rows)


def test_flash_on_the_cpu_records_the_twin_that_ran(tmp_path):
    exp = schema.build(dict(TINY, methods=["flash"], axes=dict(TINY["axes"], seq_len=[16])))
    runner.run(exp, tmp_path, measure=FakeMeasure(), log=_quiet, draw=False)
    (row,) = _rows(tmp_path / "results.csv")
    assert row["method"] == "flash" and row["device"] == "cpu"
    assert row["kernel"] == "" and row["num_warps"] == "" and row["num_stages"] == ""
    assert row["tile"] == f"m{row['block_m']}_n{row['block_n']}"


# -- clean errors, nothing written where it should not be ------------------------------------------

@pytest.fixture
def unwritable_dir(tmp_path):
    """A folder this process cannot create files in (chmod; as root, chattr +i)."""
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    immutable = False
    if os.access(d, os.W_OK) or os.geteuid() == 0:
        immutable = subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode == 0
    try:
        (d / "probe").touch()
    except OSError:
        pass
    else:
        (d / "probe").unlink()
        pytest.skip("cannot make a folder unwritable here (root without chattr)")
    yield d
    if immutable:
        subprocess.run(["chattr", "-i", str(d)])
    d.chmod(0o755)


@pytest.mark.parametrize("case", ["file", "under_file", "unwritable"])
def test_bad_out_is_a_one_line_error_and_writes_nothing(case, tmp_path, capsys, request):
    f = write(tmp_path, TINY)
    a_file = tmp_path / "taken"
    a_file.write_text("keep me")
    out = {"file": a_file, "under_file": a_file / "sub" / "dir",
           "unwritable": lambda: request.getfixturevalue("unwritable_dir") / "new"}[case]
    out = out() if callable(out) else out
    before = sorted(p for p in tmp_path.rglob("*"))
    assert cli.main(["run", str(f), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"cuflash run: --out={str(out)!r} ")
    assert {"file": "is a file", "under_file": "is a file",
            "unwritable": "cannot be made"}[case] in err
    assert sorted(p for p in tmp_path.rglob("*")) == before
    assert a_file.read_text() == "keep me"
    if case != "unwritable":   # a dry run says the same (it exited 0), and makes nothing either
        assert cli.main(["run", str(f), "--out", str(out), "--dry-run"]) == 2
        assert capsys.readouterr().err.startswith(f"cuflash run: --out={str(out)!r} ")
        fresh = tmp_path / "fresh" / "dir"
        assert cli.main(["run", str(f), "--out", str(fresh), "--dry-run"]) == 0
        assert not fresh.parent.exists()


def test_unwritable_existing_out_is_a_clear_error(unwritable_dir, capsys, tmp_path):
    f = write(tmp_path, TINY)
    assert cli.main(["run", str(f), "--out", str(unwritable_dir)]) == 2
    err = capsys.readouterr().err
    assert f"--out={str(unwritable_dir)!r} is not writable" in err
    assert list(unwritable_dir.iterdir()) == []


@pytest.mark.parametrize("name", ["..", ".", ".hidden", "-rf", "a/b", ""])
def test_experiment_name_is_one_safe_path_component(name, tmp_path):
    with pytest.raises(schema.SchemaError, match=r": name: .*must be letters"):
        schema.build(dict(TINY, name=name))
    with pytest.raises(schema.SchemaError, match=r"plots\[0\]\.name: .*must be letters"):
        schema.build(dict(TINY, plots=[{"x": "seq_len", "y": "time_ms_median", "name": name}]))


@pytest.mark.parametrize("file,name", [("my exp.yaml", "my_exp"), (".hidden.yaml", "hidden"),
                                       ("é.yaml", "_"), ("ok-1.2.yaml", "ok-1.2")])
def test_a_file_name_is_made_a_safe_default_name(file, name, tmp_path):
    """A file whose name is no safe path component was refused for a 'name' key it does not
    have; its default name is now made one. A file that is not UTF-8 names the byte and line."""
    path = tmp_path / file
    path.write_text(yaml.safe_dump(TINY))
    assert schema.load(path).name == name
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b'device: cpu\ndescription: "\xff"\n')
    with pytest.raises(schema.SchemaError, match=r"latin1.yaml: <top level>: not UTF-8 text: "
                                                 r"byte 0xff on line 2"):
        schema.load(bad)


@pytest.mark.parametrize("text", ["", "# nothing but a comment\n", "---\n"])
def test_an_empty_experiment_file_is_an_error(text, tmp_path, capsys):
    f = write(tmp_path, text)
    with pytest.raises(schema.SchemaError, match="empty"):
        schema.load(f)
    assert cli.main(["run", str(f), "--out", str(tmp_path / "out")]) == 2
    assert "empty" in capsys.readouterr().err and not (tmp_path / "out").exists()


BAD_CSVS = {"empty": b"", "header_only": ",".join(results.COLUMNS).encode() + b"\n",
            "garbage": b"lorem ipsum dolor\nsit amet, consectetur\n",
            "binary": b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe garbage",
            "wrong_columns": b"a,b,c\n1,2,3\n4,5,6\n",
            "bad_number": None}


@pytest.mark.parametrize("case", sorted(BAD_CSVS))
def test_plot_of_a_bad_csv_is_an_error(case, tmp_path, capsys):
    runner.run(schema.build(dict(TINY, plots=[{"x": "seq_len", "y": "time_ms_median"}])),
               tmp_path, measure=FakeMeasure(), log=_quiet, draw=False)
    csv_path = tmp_path / "results.csv"
    if case == "bad_number":
        csv_path.write_text(csv_path.read_text().replace(",16,", ",sixteen,", 1))
    else:
        csv_path.write_bytes(BAD_CSVS[case])
    assert cli.main(["plot", str(csv_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cuflash plot: ") and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*.png"))


def test_a_run_says_its_point_count_and_an_estimate_first(tmp_path):
    logs = []
    fake = FakeMeasure(lambda p: logs.append("<measure>") and None)
    exp = schema.build(dict(TINY, measure={"max_seconds": 2, "repeats": 1}))
    runner.run(exp, tmp_path, measure=fake, log=logs.append, draw=False)
    first = logs[:logs.index("<measure>")]
    assert any("8 points to measure" in line and "at most 16s of timing" in line
               for line in first), first


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out == f"cuflash {cuflash.__version__}\n"


def test_bfloat16_without_ml_dtypes_says_how_to_get_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_xp, "bfloat16", None)
    monkeypatch.delitem(_xp.DTYPES, "bfloat16")
    f = write(tmp_path, dict(TINY, axes=dict(TINY["axes"], dtype=["float16", "bfloat16"])))
    with pytest.raises(schema.SchemaError, match=r"axes.dtype: bfloat16 needs the ml_dtypes "
                                                 r"package.*pip install ml_dtypes"):
        schema.load(f)
    with pytest.raises(ValueError, match="pip install ml_dtypes"):
        _xp.resolve_dtype("bfloat16")
    compiled = []
    fake = types.ModuleType("cuflash.gpu.precompile")
    fake.main = lambda argv: compiled.append(argv) or 0
    monkeypatch.setitem(sys.modules, "cuflash.gpu.precompile", fake)
    assert cli.main(["compile", "--arch", "sm_90"]) == 2
    err = capsys.readouterr().err
    assert "bfloat16 needs the ml_dtypes package" in err and "pip install ml_dtypes" in err
    assert compiled == []


def test_stored_experiment_yaml_round_trips(tmp_path):
    """experiment.yaml is now written atomically: it still reloads to the same experiment."""
    exp = schema.build(dict(TINY, name="tiny"), "tiny.yaml")
    runner.write_spec(exp, tmp_path)
    again = schema.load(tmp_path / runner.SPEC_YAML)
    assert again.axes == exp.axes and again.name == "tiny"
    assert yaml.safe_load((tmp_path / runner.SPEC_YAML).read_text())["name"] == "tiny"


def test_summary_line_names_where_a_benchmark_ran():
    """env.summary_line: the date, the GPU, the driver and runtime, CuPy, torch and the commit
    (marked + when the tree had changes); on a CPU run the device says so."""
    from cuflash.experiments import env
    gpu = dict(date="2026-12-02T13:40:00+00:00", device="gpu", gpu_name="NVIDIA H200",
               driver_version="580.159.04", cuda_runtime_version=13000, cupy_version="14.2.0",
               torch_version="2.11.0+cu130", git_commit="0123456789abcdef", git_dirty=True)
    line = env.summary_line(gpu)
    for part in ("2026-12-02T13:40:00+00:00", "NVIDIA H200", "driver 580.159.04",
                 "CUDA runtime 13000", "CuPy 14.2.0", "torch 2.11.0+cu130", "cuflash 0123456789+"):
        assert part in line, (part, line)
    cpu = env.summary_line(dict(date="d", device="cpu", cpu_count=2, cupy_version=None,
                                torch_version=None, git_commit=None))
    assert "cpu (2 cores)" in cpu and "driver" not in cpu and "(no commit)" in cpu
    assert "+" not in env.summary_line(dict(gpu, git_dirty=False)).split("cuflash ")[1]


def test_compile_match_compiles_only_the_named_kernels():
    """`cuflash compile --match REGEX`: the kernels whose names it searches, reported with their
    registers and spills, and nothing else (not the preprocess, not the other defaults)."""
    import io
    from cuflash.gpu import precompile
    out = io.StringIO()
    rc = precompile.run("sm_90", False, 1, include_experiments=False, out=out,
                        match=r"^cuflash_tf32x3_bwd_dq_f32_d32_.*_causal$")
    lines = out.getvalue().splitlines()
    rows = [ln for ln in lines if ln.startswith("cuflash_")]
    assert rc == 0 and rows and all("tf32x3_bwd_dq_f32_d32" in ln and "causal" in ln
                                    for ln in rows), lines
    assert lines[-1].startswith(f"{len(rows)} compiled, 0 failed"), lines
    # a bad regex or no compiler process: argparse's one-line error, exit 2 (were a traceback
    # and a table header followed by "max_workers must be greater than 0")
    for bad, says in ((["--match", "["], "--match='[' is not a regular expression"),
                      (["--jobs", "0"], "--jobs=0: give at least 1 compiler process")):
        proc = subprocess.run([sys.executable, "-m", "cuflash", "compile", *bad],
                              capture_output=True, text=True, cwd=REPO)
        assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr
        assert proc.stdout == ""


def test_report_errors_are_one_line_and_an_empty_table_says_so(tmp_path, capsys):
    """report: a missing file or a min_T that is not an int exit 2 with one line (they were
    tracebacks); a table no row fits says so on stderr (it printed bare headers)."""
    from cuflash.experiments import report
    assert report.main(["slopes", str(tmp_path / "nope.csv")]) == 2
    assert "report slopes: cannot read" in capsys.readouterr().err
    runner.run(schema.build(TINY), tmp_path, measure=FakeMeasure(), log=_quiet, draw=False)
    csv_path = str(tmp_path / "results.csv")
    assert report.main(["slopes", csv_path, "abc"]) == 2
    assert "min_T='abc' must be an int" in capsys.readouterr().err
    assert report.main(["slopes", csv_path, "16"]) == 0
    out = capsys.readouterr()
    assert "twin" in out.out and "no row" not in out.err
    assert report.main(["io", csv_path]) == 0          # no hbm_bytes: nothing fits
    assert "report io: no row of" in capsys.readouterr().err
    # rows appended out of order by a resume: the T range is the least to the largest
    rows = _rows(csv_path)
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(sorted(rows, key=lambda r: -int(r["seq_len"])))
    assert report.main(["slopes", csv_path]) == 0
    assert "| twin | forward | 16–128 |" in capsys.readouterr().out
    # a column missing or a cell not a number: one line, exit 2 (were tracebacks)
    for edit, says in (({"seq_len": None}, "has no column 'seq_len', which this table reads"),
                       ({"time_ms_median": "fast"}, "a cell this table reads is not what it")):
        (col, val), = edit.items()
        cols = [c for c in rows[0] if c != col or val is not None]
        with open(csv_path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
            w.writeheader()
            w.writerows([dict(r, **({col: val} if val is not None else {})) for r in rows])
        assert report.main(["slopes", csv_path]) == 2
        assert says in capsys.readouterr().err


def test_a_report_says_when_rows_it_does_not_key_on_share_a_line(tmp_path):
    """report tables key on some axes only; rows of one line that differ in another (causal in
    the varlen table) were dropped or mixed silently (a padded causal row against a packed
    non-causal one). The table now says which columns varied; one problem in two sweeps is no
    clash."""
    from cuflash.experiments import report
    from cuflash.experiments.points import KEY_COLUMNS
    cols = list(dict.fromkeys(list(KEY_COLUMNS) + ["method_name", "status", "time_ms_median",
                                                   "tflops", "qkv_bytes", "layout"]))
    base = {c: "" for c in cols}
    base.update(method="twin", method_name="twin", status="ok", time_ms_median="1.0",
                tflops="0.1", qkv_bytes="100", seq_len="64", kv_len="64", head_dim="16",
                heads="2", dtype="float32", causal="false", **{"pass": "forward"},
                varlen="16,48", sweep="a")
    rows = [base, dict(base, causal="true", time_ms_median="0.6"),
            dict(base, method="twin_padded", layout="padded", time_ms_median="2.0")]
    path = tmp_path / "results.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    text = report.varlen_table(path)
    assert "Note: rows that share a line of this table differ in causal (false, true)" in text
    with open(path, "w", newline="") as f:           # the same problem in two sweeps
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows([base, dict(base, sweep="b"), rows[2]])
    assert "Note:" not in report.varlen_table(path)


def test_point_module_names_what_is_missing(monkeypatch):
    """A GPU point where CuPy is not importable is Unavailable (a recorded status, not a crash);
    a CPU point runs on NumPy (measure, decode and ring share this one rule)."""
    import types

    import numpy as np

    from cuflash.experiments import measure, unavailable
    monkeypatch.setattr(unavailable, "cupy_module", lambda: None)
    assert unavailable.point_module(types.SimpleNamespace(device="cpu")) is np
    with pytest.raises(measure.Unavailable, match="CuPy is not importable"):
        unavailable.point_module(types.SimpleNamespace(device="gpu"))
