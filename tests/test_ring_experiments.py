"""Issue 16's experiment (``cuflash.experiments.ring``): the method ``ring``, measured by worker
processes the runner starts and watches. The shipped files validate with the point counts their
comments give; a typo stops a run before any worker starts; experiments/cpu_ring.yaml runs end to
end on the CPU (simulated ranks in a worker process: CSV, plots with the ratio panel, the report,
resume); a worker that fails (an exception planted in the real worker code, out of memory, a
crash without a report, a hang past timeout_s) becomes the point's row and the run goes on;
too few GPUs is 'unavailable', measured again on resume; the communicators behind the
compute-only, comm-only and serial timings; rank 0's row from the ranks' reports. The 2-GPU run
of a small ring.yaml carries ``gpu`` (and skips with fewer than 2 GPUs)."""
from __future__ import annotations

import math
import sys
import time

import numpy as np
import pytest

from cuflash import cli
from cuflash.distributed import SimulatedRing, ring_attention, ring_attention_backward, shard
from cuflash.experiments import results, ring, runner, schema
from cuflash.experiments.points import enumerate_points

from test_experiments import REPO

BASE = {"device": "cpu",
        "axes": {"seq_len": [32, 64, 128], "head_dim": 16, "heads": 2, "dtype": "float32",
                 "causal": True, "pass": "both"},
        "methods": ["flash", {"name": "ring", "world_size": 2, "launch": "simulated",
                              "timeout_s": 30}],
        "measure": {"repeats": 2, "warmup": 0, "max_seconds": 0.05, "stable_spread": 0.5,
                    "memory": False, "error": False}}


def _quiet(*_):
    pass


def _ring(**options):
    return dict(BASE, methods=["flash", dict(BASE["methods"][1], **options)])


def _run(tmp_path, data):
    runner.run(schema.build(data), tmp_path, log=_quiet, draw=False)
    return results.read_rows(tmp_path / "results.csv")


def _by_t(rows, method="ring"):
    return {r["seq_len"]: r for r in rows if r["method"] == method}


def _planted(monkeypatch, code: str):
    """Run the workers as ``python -c CODE FOLDER``."""
    monkeypatch.setattr(ring, "worker_argv", lambda folder: [sys.executable, "-c", code,
                                                             str(folder)])


# -- the shipped files ----------------------------------------------------------------------------

def _dry_run(name, capsys) -> int:
    assert cli.main(["run", str(REPO / "experiments" / f"{name}.yaml"), "--dry-run"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    return int(first.split()[1])


def test_shipped_ring_experiments_validate_with_their_point_counts(capsys):
    counts = {n: _dry_run(n, capsys) for n in ("ring", "cpu_ring")}
    assert counts == {"ring": 30, "cpu_ring": 12}
    for name, count in counts.items():
        assert f"= {count}" in (REPO / "experiments" / f"{name}.yaml").read_text(), name
    exp = schema.load(REPO / "experiments" / "ring.yaml", smem_limit=schema.DEFAULT_SMEM_LIMIT)
    pts = enumerate_points(exp, "gpu", smem_limit=schema.DEFAULT_SMEM_LIMIT)
    rings = [p for p in pts if p.method == "ring"]
    assert len(rings) == 15 and all(p.device == "gpu" and p.world_size == 2 for p in rings)
    assert {p.slicing for p in rings} == {"zigzag"} and {p.launch for p in rings} == {"processes"}
    assert {p.seq_len for p in rings if p.sweep == "throughput"} == {
        32768, 65536, 131072, 262144, 524288}
    assert {p.dtype for p in pts} == {"bfloat16"} and {p.head_dim for p in pts} == {128}
    assert {p.heads for p in pts} == {8} and {p.pass_ for p in pts} == {"both"}
    cap = [p for p in pts if p.sweep == "capacity"]
    assert all(p.window == (4095, 0) and p.causal for p in cap)
    assert all(p.seq_len % 4 == 0 for p in pts)            # zigzag over 2 ranks: 4 chunks
    cpu = schema.load(REPO / "experiments" / "cpu_ring.yaml")
    assert cpu.device == "cpu" and [m.ring.launch for m in cpu.methods if m.ring] == ["simulated"]
    assert [pl.name for pl in cpu.plots] == [pl.name for pl in exp.plots]


# -- schema: a typo stops the run before any worker starts ----------------------------------------

TYPOS = [
    ("methods[1].slicing=zigzg", "methods[1].slicing", "'zigzag'"),
    ("methods[1].world_sise=2", "methods[1].world_sise", "valid keys"),
    ("methods[1].launch=mpi", "methods[1].launch", "'processes'"),
    ("methods[1].world_size=0", "methods[1].world_size", ">= 1"),
    ("methods[1].timeout_s=0", "methods[1].timeout_s", "> 0"),
    ("methods[1].split=maybe", "methods[1].split", "true or false"),
    ("axes[0].seq_len=[64,66]", "axes[0].seq_len", "seq_len=66 is not divisible by 4"),
    ("axes[0].kv_len=[64]", "axes[0].kv_len", "use kv_len: seq_len"),
    ("axes[0].alibi=true", "axes[0].alibi", "does not take ALiBi"),
    ("axes[1].group=2", "axes[1].group", "not wired into the ring"),
    ("plots[0].ratio_panel.denominator=flsh", "plots[0].ratio_panel.denominator", "'flash'"),
    ("plots[0].ratio_panel.target=-1", "plots[0].ratio_panel.target", "> 0"),
    ("plots[0].ratio={denominator: flash}", "plots[0].ratio_panel", "either 'ratio'"),
]


@pytest.mark.parametrize("override, path, hint", TYPOS, ids=[t[0] for t in TYPOS])
def test_a_typo_stops_the_run_before_any_worker(tmp_path, monkeypatch, capsys, override, path,
                                                hint):
    started = []
    monkeypatch.setattr(ring, "measure", lambda p, cfg: started.append(p))
    out = tmp_path / "out"
    assert cli.main(["run", "cpu_ring", "--out", str(out), "--set", override]) == 2
    err = capsys.readouterr().err
    assert f"{path}: " in err and hint in err, err
    assert started == [] and not out.exists()


# -- the CPU path end to end ----------------------------------------------------------------------

def test_cpu_ring_end_to_end(tmp_path, capsys):
    out = tmp_path / "ring"
    t0 = time.monotonic()
    assert cli.main(["run", "cpu_ring", "--out", str(out)]) == 0
    assert time.monotonic() - t0 < 60
    text = capsys.readouterr().out
    rows = results.read_rows(out / "results.csv")
    assert len(rows) == 12 and {r["status"] for r in rows} == {"ok"}, rows
    rings = [r for r in rows if r["method"] == "ring"]
    flash = [r for r in rows if r["method"] == "flash"]
    assert len(rings) == len(flash) == 6
    for r in rings:
        assert (r["world_size"], r["slicing"], r["launch"]) == (2, "zigzag", "simulated")
        assert r["error_rel"] < 1e-5, r                    # every rank's rows vs the oracle
        assert r["repeats"] >= 1 and r["time_ms_median"] > 0
        assert r["ring_compute_ms"] > 0 and r["ring_comm_ms"] > 0 and r["ring_serial_ms"] > 0
        # the CSV keeps 6 significant digits of each, so the difference of two rounded times
        # is good to ~1e-6 of the larger (a loaded machine's 10 ms times: 4 decimals)
        assert r["comm_exposed_ms"] == pytest.approx(
            r["time_ms_median"] - r["ring_compute_ms"],
            rel=1e-4, abs=1e-5 * max(r["time_ms_median"], r["ring_compute_ms"]))
        assert 0.0 <= r["comm_hidden"] <= 1.0 and 0.0 <= r["rank_spread"] < 1.0
        assert r["tflops_per_gpu"] == pytest.approx(r["tflops"] / 2, rel=1e-5)
        assert r["peak_mem_bytes"] is None and "virtual ranks" in r["note"]
    for r in flash:
        assert r["tflops_per_gpu"] == pytest.approx(r["tflops"], rel=1e-5)
        inputs = 4 * r["batch"] * r["heads"] * r["seq_len"] * r["head_dim"] * 4
        assert r["peak_total_bytes"] == r["peak_mem_bytes"] + inputs
    # the same problem, so the same FLOPs at each point
    assert {(r["sweep"], r["causal"], r["seq_len"], r["flops"]) for r in rings} == \
        {(r["sweep"], r["causal"], r["seq_len"], r["flops"]) for r in flash}
    pngs = {"ring_throughput_per_gpu.png", "ring_comm_hidden.png", "ring_max_context.png"}
    assert {p.name for p in out.glob("*.png")} == pngs
    assert all((out / n).stat().st_size > 5000 for n in pngs) and "plot:" in text
    table = ring.table(out / "results.csv")
    lines = table.splitlines()
    assert lines[0].startswith("| sweep | causal | window | T | method | ms |")
    assert sum(line.count("| ring |") for line in lines) == 6 + 2
    assert "| capacity | ring | 512 | none |" in table
    assert cli.main(["run", "cpu_ring", "--out", str(out)]) == 0          # resumed
    assert "measured 0 points (nothing new); 12 were already" in capsys.readouterr().out
    assert cli.main(["plot", str(out / "results.csv")]) == 0                # from the CSV alone
    from cuflash.experiments import report
    assert report.main(["ring", str(out / "results.csv")]) == 0


# -- failures are rows ----------------------------------------------------------------------------

PLANT = """
import sys
import cuflash.distributed as d
real = d.ring_attention_backward
def planted(dout, res, **kw):
    if res.comm.rank == 1 and dout.shape[-2] >= 32:
        raise {exc}
    return real(dout, res, **kw)
d.ring_attention_backward = planted
from cuflash.experiments.ring import worker_main
sys.exit(worker_main(sys.argv[1]))
"""


def test_a_failing_worker_is_a_row_and_the_run_goes_on(tmp_path, monkeypatch):
    """An exception on rank 1 inside the real worker (at T = 64 and 128: 32 local rows): those
    points are 'error' rows naming rank 1, its exception and where it was raised; rank 0's
    broken ring is not reported as a cause; the other points are measured; a rerun without the
    failure measures the error rows again and keeps the rest."""
    _planted(monkeypatch, PLANT.format(exc="RuntimeError('planted failure on rank 1')"))
    t0 = time.monotonic()
    rows = _run(tmp_path, BASE)
    assert time.monotonic() - t0 < 60
    got = _by_t(rows)
    assert got[32]["status"] == "ok"
    for T in (64, 128):
        note = got[T]["note"]
        assert got[T]["status"] == "error", got[T]
        assert note.startswith("rank 1 of 2: RuntimeError: planted failure on rank 1"), note
        assert "rank 0" not in note and "(at " in note, note
    assert {r["status"] for r in rows if r["method"] == "flash"} == {"ok"}
    monkeypatch.undo()
    calls = []
    real = ring.measure
    monkeypatch.setattr(ring, "measure", lambda p, cfg: calls.append(p.seq_len) or real(p, cfg))
    again = _run(tmp_path, BASE)
    assert sorted(calls) == [64, 128]
    assert {r["status"] for r in again} == {"ok"} and len(again) == 6


def test_out_of_memory_on_one_rank_is_an_oom_row(tmp_path, monkeypatch):
    _planted(monkeypatch, PLANT.format(exc="MemoryError('out of memory allocating 1 GB')"))
    got = _by_t(_run(tmp_path, BASE))
    assert got[32]["status"] == "ok"
    assert got[64]["status"] == "oom" and "rank 1 of 2: MemoryError: out of memory" in \
        got[64]["note"]
    assert got[128]["status"] == "oom-skipped"          # larger T of the method: not tried


def test_a_worker_that_dies_without_a_report(tmp_path, monkeypatch):
    _planted(monkeypatch, "import sys; print('nothing to say'); sys.exit(3)")
    got = _by_t(_run(tmp_path, dict(BASE, axes=dict(BASE["axes"], seq_len=[32]))))
    assert got[32]["status"] == "error"
    assert "worker 0 exited with code 3 without a report (log: nothing to say)" in \
        got[32]["note"]


def test_a_worker_killed_by_the_os_is_out_of_memory(tmp_path, monkeypatch):
    _planted(monkeypatch, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    got = _by_t(_run(tmp_path, dict(BASE, axes=dict(BASE["axes"], seq_len=[32]))))
    assert got[32]["status"] == "oom" and "killed by SIGKILL" in got[32]["note"]


def test_a_hanging_worker_times_out(tmp_path, monkeypatch):
    _planted(monkeypatch, "import time; print('compiling', flush=True); time.sleep(120)")
    t0 = time.monotonic()
    got = _by_t(_run(tmp_path, dict(_ring(timeout_s=1.0),
                                    axes=dict(BASE["axes"], seq_len=[32, 64]))))
    assert time.monotonic() - t0 < 30
    for T in (32, 64):
        note = got[T]["note"]
        assert got[T]["status"] == "error" and note.startswith("timed out after "), note
        assert "timeout_s=1" in note and "workers [0]" not in note and "compiling" in note


TWO_PROCESSES = """
import json, os, sys, time
from pathlib import Path
folder, rank = Path(sys.argv[1]), int(os.environ["RANK"])
assert (os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"], os.environ["MASTER_ADDR"]) == (
    "2", str(rank), "127.0.0.1") and int(os.environ["MASTER_PORT"]) > 0
assert os.environ["NCCL_NVLS_ENABLE"] == "0"
if rank == 1:
    (folder / "rank1.json").write_text(json.dumps({"rank": 1, "ok": False, "row": None,
        "failures": [{"rank": 1, "error": "OutOfMemoryError: out of memory allocating 8 GB",
                      "oom": True, "unavailable": False, "cause": True}]}))
    sys.exit(1)
print("rank 0 waits in NCCL for rank 1", flush=True)
time.sleep(120)
"""


def test_processes_launch_and_a_peer_left_waiting(tmp_path, monkeypatch):
    """launch: processes starts one worker per rank with RANK / WORLD_SIZE / LOCAL_RANK /
    MASTER_ADDR / MASTER_PORT; when rank 1 fails, rank 0 (left waiting for it, as inside NCCL)
    is stopped GRACE_S later and the row is rank 1's out of memory."""
    monkeypatch.setattr(ring, "gpu_count", lambda: 2)
    monkeypatch.setattr(ring, "GRACE_S", 0.5)
    _planted(monkeypatch, TWO_PROCESSES)
    t0 = time.monotonic()
    got = _by_t(_run(tmp_path, dict(_ring(launch="processes"),
                                    axes=dict(BASE["axes"], seq_len=[32]))))
    assert time.monotonic() - t0 < 20
    note = got[32]["note"]
    assert got[32]["status"] == "oom", got[32]
    assert note == ("MemoryError: rank 1 of 2: OutOfMemoryError: out of memory allocating 8 GB; "
                    "worker [0] stopped 0.5 s after the failure"), note


def test_too_few_gpus_is_unavailable_and_measured_again_on_resume(tmp_path, monkeypatch):
    monkeypatch.setattr(ring, "gpu_count", lambda: 1)
    launched = []
    monkeypatch.setattr(ring, "worker_argv", lambda folder: launched.append(folder))
    data = _ring(launch="processes")
    rows = _run(tmp_path, data)
    got = _by_t(rows)
    assert launched == [] and len(got) == 3
    for r in got.values():
        assert r["status"] == "unavailable" and r["device"] == "gpu"
        assert r["note"] == ("skipped: a ring of 2 ranks runs one process per GPU and needs 2 "
                             "GPUs; 1 visible here")
    summary = runner.run(schema.build(data), tmp_path, log=_quiet, draw=False)
    assert summary.measured == 3 and summary.skipped == 3        # the flash rows stay


# -- the pieces -----------------------------------------------------------------------------------

@pytest.mark.parametrize("N", [2, 3])
def test_communicators_behind_the_split_timings(N):
    """SerialComm gives the ring's results exactly; RecordingComm sees every shift (forward
    N - 1, backward N + 1 of them); LoopbackComm runs the same calls without transfers."""
    L = 4 * N * 3
    g = np.random.default_rng(N)
    q, k, v, do = (g.standard_normal((1, 2, L, 16)).astype(np.float32) for _ in range(4))
    parts = [[shard(x, N, r) for r in range(N)] for x in (q, k, v, do)]

    def both(comm, q, k, v, do):
        out, res = ring_attention(q, k, v, comm=comm, causal=True, return_residuals=True)
        return (out,) + ring_attention_backward(do, res)

    plain = SimulatedRing(N).run(lambda c, *a: both(c, *a), *parts)
    serial = SimulatedRing(N).run(lambda c, *a: both(ring.SerialComm(c), *a), *parts)
    for a, b in zip(plain, serial):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    recorders = []

    def recorded(c, *a):
        rec = ring.RecordingComm(c)
        recorders.append(rec)
        return both(rec, *a)

    SimulatedRing(N).run(recorded, *parts)
    for rec in recorders:
        assert len(rec.shifts) == (N - 1) + (N + 1)
        assert [len(s) for s in rec.shifts] == [2] * (N - 1) + [2] + [4] * (N - 2) + [2, 2]
    loop = [both(ring.LoopbackComm(r, N), *(p[r] for p in parts)) for r in range(N)]
    assert all(x.shape == y.shape for a, b in zip(loop, plain) for x, y in zip(a, b))


def test_row_of_rank_reports():
    """Per call the slowest rank; medians over calls; exposed and hidden from the medians;
    error_rel as max error over max reference across ranks; NaN anywhere: inf."""
    point = enumerate_points(schema.build(BASE))[1]
    got = [{"t": [10.0, 12.0, 11.0], "c": [8.0, 9.0, 8.5], "m": [1.0, 1.2, 1.1], "s": None,
            "errs": [[1e-6, 2.0, False]], "base": 100, "peak": 400, "shifts": 4},
           {"t": [11.0, 10.0, 11.5], "c": [8.2, 8.1, 8.0], "m": [1.1, 1.0, 1.0], "s": None,
            "errs": [[3e-6, 1.0, False]], "base": 120, "peak": 300, "shifts": 4}]
    row = ring._row(point, got)
    assert row["time_ms_median"] == 11.5 and row["repeats"] == 3     # max per call: 11, 12, 11.5
    assert row["ring_compute_ms"] == 8.5 and row["ring_comm_ms"] == 1.1
    assert row["comm_exposed_ms"] == pytest.approx(3.0)
    assert row["comm_hidden"] == 0.0                                  # 3 ms above, 1.1 of comm
    assert row["rank_spread"] == pytest.approx((11.0 - 11.0) / 11.0)
    assert row["error_rel"] == pytest.approx(3e-6 / 2.0)
    assert (row["peak_mem_bytes"], row["peak_total_bytes"]) == (300, 400)
    got[1]["c"] = [11.9, 11.9, 11.9]
    assert ring._row(point, got)["comm_hidden"] == 1.0               # faster than its kernels
    got[0]["errs"] = [[0.0, 1.0, True]]
    assert math.isinf(ring._row(point, got)["error_rel"])


def test_ring_points_carry_their_options():
    exp = schema.build(_ring(world_size=4, slicing="contiguous", serial=True, timeout_s=7))
    p = [p for p in enumerate_points(exp) if p.method == "ring"][0]
    assert (p.world_size, p.slicing, p.launch, p.ring_split, p.ring_serial, p.ring_timeout_s) \
        == (4, "contiguous", "simulated", True, True, 7.0)
    assert p.columns()["world_size"] == 4 and "ring of 4 ranks (contiguous, simulated)" in \
        p.describe()
    assert p.deterministic is True and p.fwd_tile is None
    row = {**p.columns(), "status": "ok"}
    from cuflash.experiments.points import point_of_row
    assert point_of_row({k: results.cell_text(v) for k, v in row.items()}).world_size == 4


# -- two GPUs -------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(ring.gpu_count() < 2, reason="needs 2 GPUs")
def test_ring_yaml_small_on_two_gpus(tmp_path):
    """experiments/ring.yaml cut small, on 2 GPUs through NCCL worker processes: every row ok,
    the small point checked against the float64 oracle on both ranks, the split timings and
    the memory per GPU recorded. (Also compiles the kernels ring.yaml needs.)"""
    out = tmp_path / "ring"
    assert cli.main(["run", "ring", "--out", str(out), "--set", "axes[0].seq_len=[1024,16384]",
                     "--set", "axes[1].seq_len=[65536]", "--set", "measure.repeats=2"]) == 0
    rows = results.read_rows(out / "results.csv")
    assert len(rows) == 10 and {r["status"] for r in rows} == {"ok"}, rows
    rings = [r for r in rows if r["method"] == "ring"]
    for r in rings:
        assert r["launch"] == "processes" and r["world_size"] == 2
        assert r["ring_compute_ms"] > 0 and r["ring_comm_ms"] > 0
        assert r["peak_total_bytes"] > r["peak_mem_bytes"] > 0
    small = [r for r in rings if r["seq_len"] == 1024]
    assert small and all(r["error_rel"] < 3e-2 for r in small), small
