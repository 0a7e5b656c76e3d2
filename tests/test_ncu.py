"""hbm_bytes in batches: ncu's CSV cut at the marker kernels, one_call's loop over several points,
one ncu process per batch (a fake ncu executable), and the runner's batching, failures and resume.
CPU only: the GPU, ncu and the measurements are faked."""
from __future__ import annotations

import csv
import json
import stat
import sys

import pytest

import cuflash._xp
from cuflash.experiments import ncu, one_call, runner, schema
from cuflash.experiments.points import Point, enumerate_points

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
          '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
          '"Metric Value"')
GEMM = ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_128x2_nn_align8>"
        "(cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_128x2_nn_align8::Params)")


def rows(kid, name, grid, read, write, unit="byte"):
    """ncu's two CSV lines of one kernel (--csv --print-units base)."""
    def line(metric, value):
        return (f'"{kid}","5150","python3.12","gpu-host","{name}","1","7","(128, 1, 1)",'
                f'"{grid}","0","9.0","Command line profiler metrics","{metric}","{unit}",'
                f'"{value}"')
    return [line("dram__bytes_read.sum", read), line("dram__bytes_write.sum", write)]


def marker(kid, index):
    return rows(kid, "cuflash_ncu_marker", f"({index + 1}, 1, 1)", "64", "0")


def sample_lines():
    """Three points: naive (three kernels, one a cuBLAS template), one with no kernel (its call
    failed before launching any), flash (one kernel); each followed by its marker."""
    return (["==PROF== Connected to process 5150 (/usr/bin/python3.12)",
             '==PROF== Profiling "cupy_copy__float16_float32" - 0: 0%....50%....100% - 9 passes',
             "==PROF== Profiling \"cuflash_ncu_marker\" - 3: 0%....50%....100% - 9 passes",
             "==PROF== Disconnected from process 5150",
             HEADER]
            + rows(0, "cupy_copy__float16_float32", "(2048, 1, 1)", "4,194,304", "8,388,608")
            + rows(1, GEMM, "(16, 16, 8)", "1,073,741,824", "536,870,912")
            + rows(2, "cupy_exp__float_float", "(4096, 1, 1)", "2.5", "0", unit="Mbyte")
            + marker(3, 0)
            + marker(4, 1)
            + rows(5, "cuflash_mma_fwd_f16_d64_m128_n64_w4_s2", "(16, 8, 1)", "6,291,456", "0")
            + marker(6, 2))


def sample(lines=None):
    return "\n".join(lines or sample_lines()) + "\n"


NAIVE_READ = 4194304 + 1073741824 + 2500000
NAIVE_WRITE = 8388608 + 536870912


def test_split_at_markers():
    groups = ncu.split_ncu_csv(sample())
    assert [g.index for g in groups] == [0, 1, 2]
    got = ncu.attribute(groups, 3)
    assert got[0] == ncu.NcuBytes(NAIVE_READ, NAIVE_WRITE,
                                  ("cupy_copy__float16_float32", GEMM, "cupy_exp__float_float"))
    assert got[1] == ncu.NcuBytes(0, 0, ())                      # no kernel: zero bytes
    assert got[2] == ncu.NcuBytes(6291456, 0, ("cuflash_mma_fwd_f16_d64_m128_n64_w4_s2",))
    # the markers' own 64 bytes are nowhere; the single-call parser leaves them out too
    assert ncu.parse_ncu_csv(sample()).bytes_read == NAIVE_READ + 6291456


def test_split_orders_rows_by_id_and_skips_noise():
    lines = sample_lines()
    body = lines[5:]
    shuffled = lines[:5] + body[::-1] + ["one_call: a line the program printed",
                                         "==PROF== Report: none"]
    assert ncu.attribute(ncu.split_ncu_csv(sample(shuffled)), 3) == ncu.attribute(
        ncu.split_ncu_csv(sample()), 3)


def test_kernels_after_the_last_marker_are_nobodys():
    lines = sample_lines() + rows(7, "cupy_exp__float_float", "(1, 1, 1)", "100", "100")
    groups = ncu.split_ncu_csv(sample(lines))
    assert [g.index for g in groups] == [0, 1, 2, None]
    got = ncu.attribute(groups, 3)
    assert got[2].bytes_read == 6291456


def test_marker_missing_makes_its_points_unattributable():
    lines = [ln for ln in sample_lines() if not ln.startswith('"4",')]   # point 1's marker
    got = ncu.attribute(ncu.split_ncu_csv(sample(lines)), 3)
    assert got[0].bytes_read == NAIVE_READ
    assert isinstance(got[1], ncu.NcuUnavailable) and isinstance(got[2], ncu.NcuUnavailable)
    assert "ncu reported 2 marker kernels for 3 points" in str(got[1])
    assert "point 1's marker is missing" in str(got[1])
    assert "point 2's kernels cannot be told apart" in str(got[2])
    assert str(got[2]).startswith("hbm_bytes unavailable: ")
    # the first marker missing: point 0 has no marker, point 1 would hold point 0's kernels
    lines = [ln for ln in sample_lines() if not ln.startswith('"3",')]
    got = ncu.attribute(ncu.split_ncu_csv(sample(lines)), 3)
    assert [type(r).__name__ for r in got] == ["NcuUnavailable", "NcuUnavailable", "NcuBytes"]
    # more points than markers at the end (the program stopped early)
    got = ncu.attribute(ncu.split_ncu_csv(sample()), 5)
    assert [type(r).__name__ for r in got[3:]] == ["NcuUnavailable"] * 2
    assert "ncu reported 3 marker kernels for 5 points" in str(got[4])


def test_markers_without_grid_are_counted_in_order():
    lines = [ln.replace('"(1, 1, 1)"', '""').replace('"(2, 1, 1)"', '""')
             .replace('"(3, 1, 1)"', '""') for ln in sample_lines()]
    got = ncu.attribute(ncu.split_ncu_csv(sample(lines)), 3)
    assert [r.bytes_read for r in got] == [NAIVE_READ, 0, 6291456]


def test_status_and_bad_values_are_per_point():
    lines = [ln.replace('"6,291,456"', '"n/a"') for ln in sample_lines()]
    statuses = {0: {"index": 0, "ok": False, "error": "OutOfMemoryError: out of memory"},
                2: {"index": 2, "ok": True}}
    got = ncu.attribute(ncu.split_ncu_csv(sample(lines)), 3, statuses)
    assert str(got[0]) == "hbm_bytes unavailable: under ncu, OutOfMemoryError: out of memory"
    assert "one_call wrote no status for point 1" in str(got[1])
    assert "'n/a'" in str(got[2]) and "cuflash_mma_fwd" in str(got[2])


def test_no_table_at_all():
    with pytest.raises(ncu.NcuUnavailable, match="no metrics table"):
        ncu.split_ncu_csv("==PROF== Disconnected from process 1\n==ERROR== ERR_NVGPUCTRPERM\n")


# -- one ncu process per batch (a fake ncu executable) ---------------------------------------------

FAKE_NCU = r'''
import json, sys
args = sys.argv[1:]
assert args[:5] == ["--clock-control", "none", "--profile-from-start", "off", "--metrics"], args
assert args[args.index("-m") + 1] == "cuflash.experiments.one_call", args
with open(args[args.index("--points") + 1]) as f:
    points = [json.loads(p) for p in json.load(f)]
status = open(args[args.index("--status") + 1], "a")
with open(sys.argv[0] + ".calls", "a") as f:
    f.write(json.dumps([p["seq_len"] for p in points]) + "\n")
print("==PROF== Connected to process 77 (python3)")
print(HEADER)
kid = 0
def emit(name, grid, read, write):
    global kid
    for metric, value in (("dram__bytes_read.sum", read), ("dram__bytes_write.sum", write)):
        print(f'"{kid}","77","python3","h","{name}","1","7","(1, 1, 1)","{grid}","0","9.0",'
              f'"Command line profiler metrics","{metric}","byte","{value:,}"')
    kid += 1
for i, p in enumerate(points):
    if p["seq_len"] == CRASH_AT:
        sys.stderr.write("Segmentation fault\n")
        sys.exit(139)
    ok = p["seq_len"] != OOM_AT
    if ok:
        emit("cuflash_kernel", "(4, 1, 1)", p["seq_len"] * 1000, p["seq_len"])
        emit("cupy_copy", "(4, 1, 1)", 1, 0)
    emit("cuflash_ncu_marker", f"({i + 1}, 1, 1)", 32, 0)
    status.write(json.dumps({"index": i, "ok": ok, "marker": True,
                             "error": None if ok else "OutOfMemoryError: out of memory"}) + "\n")
'''


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    def make(oom_at=-1, crash_at=-1):
        path = tmp_path / "ncu"
        path.write_text(f"#!{sys.executable}\nHEADER = {HEADER!r}\nOOM_AT = {oom_at}\n"
                        f"CRASH_AT = {crash_at}\n" + FAKE_NCU)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        monkeypatch.setattr(ncu, "find_ncu", lambda: str(path))
        return path
    return make


def gpu_points(seq_lens=(16, 32, 64, 128)):
    exp = schema.build({"device": "cpu", "methods": ["naive"],
                        "axes": {"seq_len": list(seq_lens), "head_dim": 16, "heads": 2,
                                 "dtype": "float32"}})
    return [Point(**{**p.__dict__, "device": "gpu"}) for p in enumerate_points(exp)]


def test_measure_hbm_many_one_process(fake_ncu):
    path = fake_ncu(oom_at=64)
    pts = gpu_points()
    got = ncu.measure_hbm_many([p.to_json() for p in pts], timeout_s=60)
    assert (path.parent / "ncu.calls").read_text().splitlines() == ["[16, 32, 64, 128]"]
    assert [(r.bytes_read, r.bytes_written, len(r.kernels)) for r in (got[0], got[1], got[3])] == [
        (16001, 16, 2), (32001, 32, 2), (128001, 128, 2)]
    assert str(got[2]) == "hbm_bytes unavailable: under ncu, OutOfMemoryError: out of memory"
    assert ncu.measure_hbm(pts[0].to_json(), 60).bytes_read == 16001
    with pytest.raises(ncu.NcuUnavailable, match="out of memory"):
        ncu.measure_hbm(pts[2].to_json(), 60)


def test_measure_hbm_many_crash_keeps_the_points_before(fake_ncu):
    fake_ncu(crash_at=64)
    got = ncu.measure_hbm_many([p.to_json() for p in gpu_points()], timeout_s=60)
    assert [r.bytes_read for r in got[:2]] == [16001, 32001]
    for r in got[2:]:
        assert isinstance(r, ncu.NcuUnavailable)
        assert "no status" in str(r) and "ncu exited 139: Segmentation fault" in str(r)


def test_measure_hbm_many_without_ncu(monkeypatch):
    monkeypatch.setattr(ncu, "find_ncu", lambda: None)
    got = ncu.measure_hbm_many(['{"a": 1}', '{"b": 2}'])
    assert [str(r) for r in got] == ["hbm_bytes unavailable: ncu not found"] * 2
    assert ncu.measure_hbm_many([]) == []


def test_batch_command():
    cmd = ncu.batch_command("/x/ncu", "/t/p.json", "/t/s.jsonl", "/py")
    assert cmd[:5] == ["/x/ncu", "--clock-control", "none", "--profile-from-start", "off"]
    assert "dram__bytes_read.sum,dram__bytes_write.sum" in cmd and "--csv" in cmd
    assert cmd[-7:] == ["/py", "-m", "cuflash.experiments.one_call", "--points", "/t/p.json",
                        "--status", "/t/s.jsonl"]
    # the kernel one_call launches is the one the parser cuts at
    assert one_call.MARKER == ncu.MARKER and f"void {ncu.MARKER}()" in one_call._MARKER_SRC


# -- one_call's loop -------------------------------------------------------------------------------

class FakeGpu:
    def __init__(self, events):
        self.events = events

    def synchronize(self):
        self.events.append("sync")

    def profiler_start(self):
        self.events.append("start")

    def profiler_stop(self):
        self.events.append("stop")

    def marker(self, index):
        self.events.append(f"marker {index}")

    def free(self):
        self.events.append("free")


def test_one_call_marks_every_point_and_survives_failures(tmp_path, monkeypatch, capsys):
    events: list[str] = []

    def build_call(point, inputs):
        if point.seq_len == 32:
            raise MemoryError("out of memory making the inputs")

        def fn():
            print("noise from the call")          # must not reach stdout (ncu's CSV)
            events.append(f"call {point.seq_len}")
            if point.seq_len == 64:
                raise RuntimeError("CUDA_ERROR_LAUNCH_FAILED")
            return object()
        return types_call(fn)

    monkeypatch.setattr(one_call, "make_inputs", lambda p, seed, on_host: {"seed": seed})
    monkeypatch.setattr(one_call, "build_call", build_call)
    pts = gpu_points()
    points_file, status = tmp_path / "p.json", tmp_path / "s.jsonl"
    points_file.write_text(json.dumps([p.to_json() for p in pts[1:]]))
    assert one_call.main([pts[0].to_json(), "--points", str(points_file), "--status", str(status),
                          "--seed", "3"], gpu=FakeGpu(events)) == 0
    assert capsys.readouterr().out == ""
    assert events == ["marker 0", "sync",                            # the marker, warmed up
                      "sync", "start", "call 16", "sync", "marker 0", "sync", "stop", "free",
                      "start", "marker 1", "sync", "stop", "free",    # build failed: marker alone
                      "sync", "start", "call 64", "marker 2", "sync", "stop", "free",
                      "sync", "start", "call 128", "sync", "marker 3", "sync", "stop", "free"]
    lines = [json.loads(ln) for ln in status.read_text().splitlines()]
    assert [(s["index"], s["ok"], s["marker"]) for s in lines] == [
        (0, True, True), (1, False, True), (2, False, True), (3, True, True)]
    assert lines[1]["error"] == "MemoryError: out of memory making the inputs"
    assert lines[2]["error"] == "RuntimeError: CUDA_ERROR_LAUNCH_FAILED"


def types_call(fn):
    from cuflash.experiments.measure import Call
    return Call(fn, "cupy", lambda r: ())


def test_one_call_old_form_has_no_marker(monkeypatch):
    events: list[str] = []
    monkeypatch.setattr(one_call, "make_inputs", lambda p, seed, on_host: events.append(seed))
    monkeypatch.setattr(one_call, "build_call",
                        lambda p, i: types_call(lambda: events.append("call")))
    assert one_call.main([gpu_points()[0].to_json(), "5"], gpu=FakeGpu(events)) == 0
    assert events == [5, "sync", "start", "call", "sync", "stop", "free"]


# -- the runner: batches, failures as notes, resume ------------------------------------------------

GPU_EXP = {"device": "gpu", "methods": ["naive"],
           "axes": {"seq_len": [16, 32, 64, 128, 256, 512, 1024, 2048], "head_dim": 16,
                    "heads": 2, "dtype": "float32"},
           "measure": {"repeats": 1, "warmup": 0, "hbm_bytes": True, "memory": False,
                       "error": False}}


def fake_measure(fail=lambda p: None):
    calls = []

    def measure(point, cfg):
        calls.append(point.seq_len)
        exc = fail(point)
        if exc is not None:
            raise exc
        return {"repeats": 1, "time_ms_median": 1.0, "time_ms_p20": 1.0, "time_ms_p80": 1.0}
    measure.calls = calls
    return measure


class FakeHbmMany:
    """Records each batch (seq_lens); returns bytes from the seq_len; ``fail(batch_no)`` may return
    an exception to raise for that batch."""

    def __init__(self, fail=lambda n: None, unavailable=()):
        self.batches: list[list[int]] = []
        self.fail = fail
        self.unavailable = unavailable

    def __call__(self, point_jsons, timeout_s):
        seq = [json.loads(j)["seq_len"] for j in point_jsons]
        self.batches.append(seq)
        exc = self.fail(len(self.batches))
        if exc is not None:
            raise exc
        return [ncu.NcuUnavailable(f"hbm_bytes unavailable: no marker for T={t}")
                if t in self.unavailable else ncu.NcuBytes(t * 100, t, ("a", "b", "c"))
                for t in seq]


@pytest.fixture
def gpu_visible(monkeypatch):
    monkeypatch.setattr(cuflash._xp, "gpu_available", lambda: True)


def csv_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_runner_measures_hbm_in_batches(tmp_path, gpu_visible):
    exp = schema.build(GPU_EXP, "g.yaml")
    hbm = FakeHbmMany(unavailable=(64,))
    measure = fake_measure(lambda p: MemoryError("no room") if p.seq_len == 1024 else None)
    logs: list[str] = []
    s = runner.run(exp, tmp_path, measure=measure, hbm_many=hbm, hbm_batch=3, log=logs.append,
                   draw=False)
    # 16 32 64 | 128 256 512 | 1024 (oom) 2048 (oom-skipped): the last batch has no ncu point
    assert hbm.batches == [[16, 32, 64], [128, 256, 512]]
    rows = csv_rows(tmp_path / "results.csv")
    assert [int(r["seq_len"]) for r in rows] == GPU_EXP["axes"]["seq_len"]     # in order
    assert [r["status"] for r in rows] == ["ok"] * 6 + ["oom", "oom-skipped"]
    by_t = {int(r["seq_len"]): r for r in rows}
    for t in (16, 32, 128, 256, 512):
        r = by_t[t]
        assert int(r["hbm_bytes"]) == t * 101 and int(r["hbm_bytes_read"]) == t * 100
        assert r["hbm_kernels"] == "3" and not r["note"]
        assert float(r["hbm_pred_ratio"]) == pytest.approx(t * 101 / int(r["pred_bytes"]), rel=1e-5)
        assert float(r["hbm_gbps"]) == pytest.approx(t * 101 / 1e-3 / 1e9)
    assert by_t[64]["status"] == "ok" and by_t[64]["hbm_bytes"] == ""
    assert by_t[64]["note"] == "hbm_bytes unavailable: no marker for T=64"
    assert s.statuses == {"ok": 6, "oom": 1, "oom-skipped": 1} and s.measured == 8
    assert sum("ncu: 3 of 3 measured" in ln for ln in logs) == 1
    assert sum("ncu: 2 of 3 measured" in ln for ln in logs) == 1


def test_runner_ncu_failure_is_a_note(tmp_path, gpu_visible):
    exp = schema.build(GPU_EXP, "g.yaml")
    hbm = FakeHbmMany(fail=lambda n: RuntimeError("ncu crashed") if n == 2 else None)
    runner.run(exp, tmp_path, measure=fake_measure(), hbm_many=hbm, hbm_batch=3,
               log=lambda s: None, draw=False)
    assert [len(b) for b in hbm.batches] == [3, 3, 2]
    rows = csv_rows(tmp_path / "results.csv")
    assert len(rows) == 8 and {r["status"] for r in rows} == {"ok"}
    failed = [r for r in rows if int(r["seq_len"]) in hbm.batches[1]]
    assert all(r["note"] == "hbm_bytes unavailable: RuntimeError: ncu crashed"
               and r["hbm_bytes"] == "" for r in failed)
    assert all(r["hbm_bytes"] for r in rows if r not in failed)


def test_runner_interrupted_in_a_batch_resumes_only_missing(tmp_path, gpu_visible):
    exp = schema.build(GPU_EXP, "g.yaml")
    hbm = FakeHbmMany(fail=lambda n: KeyboardInterrupt() if n == 2 else None)
    with pytest.raises(KeyboardInterrupt):
        runner.run(exp, tmp_path, measure=fake_measure(), hbm_many=hbm, hbm_batch=3,
                   log=lambda s: None, draw=False)
    rows = csv_rows(tmp_path / "results.csv")
    assert [int(r["seq_len"]) for r in rows] == [16, 32, 64]      # the first batch is safe
    assert all(r["hbm_bytes"] for r in rows)
    again, measure = FakeHbmMany(), fake_measure()
    s = runner.run(exp, tmp_path, measure=measure, hbm_many=again, hbm_batch=3,
                   log=lambda s: None, draw=False)
    assert measure.calls == [128, 256, 512, 1024, 2048] and s.skipped == 3
    assert again.batches == [[128, 256, 512], [1024, 2048]]
    rows = csv_rows(tmp_path / "results.csv")
    assert sorted(int(r["seq_len"]) for r in rows) == GPU_EXP["axes"]["seq_len"]
    assert all(r["status"] == "ok" and r["hbm_bytes"] for r in rows)


def test_runner_without_ncu_notes_every_row(tmp_path, gpu_visible, monkeypatch):
    monkeypatch.setattr(ncu, "find_ncu", lambda: None)
    exp = schema.build(GPU_EXP, "g.yaml")
    runner.run(exp, tmp_path, measure=fake_measure(), log=lambda s: None, draw=False)
    rows = csv_rows(tmp_path / "results.csv")
    assert len(rows) == 8 and all(r["status"] == "ok" and r["hbm_bytes"] == "" and
                                  r["note"] == "hbm_bytes unavailable: ncu not found"
                                  for r in rows)


def test_runner_real_batch_path_with_fake_ncu(tmp_path, gpu_visible, fake_ncu):
    """measure_hbm_many through the runner: one fake-ncu process per batch."""
    path = fake_ncu(oom_at=128)
    exp = schema.build(GPU_EXP, "g.yaml")
    runner.run(exp, tmp_path / "r", measure=fake_measure(), hbm_batch=5, log=lambda s: None,
               draw=False)
    assert [json.loads(ln) for ln in (path.parent / "ncu.calls").read_text().splitlines()] == [
        [16, 32, 64, 128, 256], [512, 1024, 2048]]
    by_t = {int(r["seq_len"]): r for r in csv_rows(tmp_path / "r" / "results.csv")}
    assert int(by_t[2048]["hbm_bytes_read"]) == 2048001
    assert by_t[128]["note"] == "hbm_bytes unavailable: under ncu, OutOfMemoryError: out of memory"
