"""Measured DRAM bytes of points through Nsight Compute (``hbm_bytes``, issue #6).

One ncu process profiles a batch of points: the runner calls ``measure_hbm_many``, which starts
``ncu … python -m cuflash.experiments.one_call --points FILE --status FILE``. one_call makes each
point's inputs (and, for a backward point, the forward's out and lse), then brackets exactly one
call of the measured method, followed by the marker kernel ``cuflash_ncu_marker`` (grid
(index + 1, 1, 1)), with cudaProfilerStart/Stop; ncu runs with ``--profile-from-start off``, so
every kernel it reports belongs to one of those calls or is a marker (CuPy's own elementwise
kernels in naive included: they are part of naive). ``split_ncu_csv`` cuts ncu's kernel list at
the markers; a point's bytes are summed over the kernels between its marker and the previous one
(the marker's own bytes excluded). A point whose kernels cannot be told apart from another's (a
marker missing from ncu's table), or whose call failed in one_call, gets an ``NcuUnavailable``
whose message is the note recorded in its row; the other points of the batch keep their bytes.
"""
from __future__ import annotations

import csv
import dataclasses
import glob
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
MARKER = "cuflash_ncu_marker"          # the kernel one_call launches after each point
_UNITS = {"byte": 1, "bytes": 1, "b": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
          "kibyte": 2 ** 10, "mibyte": 2 ** 20, "gibyte": 2 ** 30}


class NcuUnavailable(Exception):
    """ncu is missing or could not profile; the message is the note recorded in the row."""


@dataclasses.dataclass(frozen=True)
class NcuBytes:
    """DRAM bytes summed over the kernels of one profiled call."""

    bytes_read: int
    bytes_written: int
    kernels: tuple[str, ...]

    @property
    def bytes_total(self) -> int:
        return self.bytes_read + self.bytes_written


@dataclasses.dataclass
class Kernel:
    """One profiled kernel of ncu's table: its metrics in bytes, or why a value was unreadable."""

    id: int
    name: str
    grid: str
    values: dict = dataclasses.field(default_factory=dict)
    problem: str | None = None

    @property
    def is_marker(self) -> bool:
        return MARKER in self.name

    def marker_index(self) -> int | None:
        """The point index a marker names: its grid's x dimension minus one."""
        m = re.match(r"\s*\(?\s*(\d+)", self.grid or "")
        return int(m.group(1)) - 1 if m else None


@dataclasses.dataclass(frozen=True)
class Group:
    """The kernels ncu reported between two markers, ended by marker ``index`` (None: the kernels
    after the last marker, which no marker claims)."""

    index: int | None
    kernels: tuple[Kernel, ...]

    def total(self) -> NcuBytes:
        """Bytes summed over the group's kernels; NcuUnavailable if one had no usable value."""
        bad = next((k for k in self.kernels if k.problem), None)
        if bad is not None:
            raise NcuUnavailable(bad.problem)
        return NcuBytes(int(round(sum(k.values[METRICS[0]] for k in self.kernels))),
                        int(round(sum(k.values[METRICS[1]] for k in self.kernels))),
                        tuple(k.name for k in self.kernels))


def find_ncu() -> str | None:
    """Path of the ncu executable: PATH, then /usr/local/cuda/bin, then /opt/nvidia/nsight-compute."""
    found = shutil.which("ncu")
    if found:
        return found
    candidates = ["/usr/local/cuda/bin/ncu"] + sorted(
        glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)
    return next((c for c in candidates if os.path.isfile(c) and os.access(c, os.X_OK)), None)


def parse_kernels(text: str) -> list[Kernel]:
    """The kernels of ncu's CSV output, in profiling order ('ID' ascending).

    ``text`` is ncu's stdout with ``--csv``: '==PROF==' lines and the program's own output may
    surround the CSV; only lines starting with a double quote are read. One row per (kernel,
    metric); kernels are told apart by their 'ID' column. Values may carry thousands separators;
    units are converted to bytes (``--print-units base`` gives 'byte'). A kernel lacking one of
    METRICS, or with a value that is not a number, gets a ``problem``.
    """
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    header = next((i for i, ln in enumerate(lines) if '"Metric Name"' in ln), None)
    if header is None:
        raise NcuUnavailable("ncu printed no metrics table (no kernel was profiled?)")
    kernels: dict[int, Kernel] = {}
    for n, row in enumerate(csv.DictReader(io.StringIO("\n".join(lines[header:])))):
        if row.get("Metric Name") == "Metric Name":          # a repeated header
            continue
        try:
            kid = int((row.get("ID") or "").replace(",", ""))
        except ValueError:
            raise NcuUnavailable(f"ncu's table has an unreadable kernel ID {row.get('ID')!r} "
                                 f"(line {n + 2} of the table)") from None
        k = kernels.get(kid)
        if k is None:
            k = kernels[kid] = Kernel(kid, row.get("Kernel Name") or "?",
                                      row.get("Grid Size") or "")
        metric = row.get("Metric Name")
        if metric not in METRICS:
            continue
        raw = (row.get("Metric Value") or "").replace(",", "").strip()
        unit = (row.get("Metric Unit") or "byte").strip().lower()
        try:
            value = float(raw)
        except ValueError:
            k.problem = k.problem or f"ncu gave {metric}={raw!r} for kernel {k.name!r}"
            continue
        if unit not in _UNITS:
            k.problem = k.problem or f"unknown unit {unit!r} for {metric}"
            continue
        k.values[metric] = k.values.get(metric, 0.0) + value * _UNITS[unit]
    out = [kernels[i] for i in sorted(kernels)]
    for k in out:
        missing = [m for m in METRICS if m not in k.values]
        if missing and not k.problem:
            k.problem = f"ncu's table has no {', '.join(missing)} for kernel {k.name!r}"
    return out


def parse_ncu_csv(text: str) -> NcuBytes:
    """Sum dram__bytes_read.sum and dram__bytes_write.sum over every kernel of ncu's CSV output
    (markers excluded): the bytes of one profiled call (see ``parse_kernels``)."""
    kernels = [k for k in parse_kernels(text) if not k.is_marker]
    if not any(k.values for k in kernels):
        raise NcuUnavailable(f"ncu's table has none of the metrics {list(METRICS)}")
    return Group(None, tuple(kernels)).total()


def split_ncu_csv(text: str) -> list[Group]:
    """ncu's kernels cut at the markers, in profiling order: one group per marker, holding the
    kernels since the previous marker (the marker itself left out), named by the point index the
    marker's grid gives; then, if any, the kernels after the last marker (index None). A marker
    whose grid cannot be read is numbered by its position among the markers."""
    groups, pending, n_markers = [], [], 0
    for k in parse_kernels(text):
        if k.is_marker:
            index = k.marker_index()
            groups.append(Group(n_markers if index is None else index, tuple(pending)))
            pending, n_markers = [], n_markers + 1
        else:
            pending.append(k)
    if pending:
        groups.append(Group(None, tuple(pending)))
    return groups


def attribute(groups: list[Group], n_points: int,
              statuses: dict[int, dict] | None = None) -> list[NcuBytes | NcuUnavailable]:
    """Bytes of each of ``n_points`` points from ``split_ncu_csv``'s groups and one_call's status
    lines (by index; None: assume every point ran). Point i's group is trusted only when marker i
    appears once and the marker before it in ncu's order is marker i - 1 (point 0: it is the first
    marker); otherwise its kernels may be mixed with another point's and it gets NcuUnavailable."""
    markers = [g.index for g in groups if g.index is not None]
    by_index: dict[int, list[int]] = {}
    for pos, g in enumerate(groups):
        if g.index is not None:
            by_index.setdefault(g.index, []).append(pos)
    count = (f"ncu reported {len(markers)} marker kernel{'s' * (len(markers) != 1)} for "
             f"{n_points} point{'s' * (n_points != 1)}")
    out: list[NcuBytes | NcuUnavailable] = []
    for i in range(n_points):
        st = statuses.get(i) if statuses is not None else {"ok": True}
        if st is None:
            out.append(NcuUnavailable(f"hbm_bytes unavailable: one_call wrote no status for "
                                      f"point {i} of the batch ({count})"))
            continue
        if not st.get("ok"):
            out.append(NcuUnavailable(f"hbm_bytes unavailable: under ncu, "
                                      f"{st.get('error') or 'the call failed'}"))
            continue
        where = by_index.get(i, [])
        if len(where) != 1:
            out.append(NcuUnavailable(
                f"hbm_bytes unavailable: {count}; point {i}'s marker "
                + ("is missing" if not where else f"appears {len(where)} times")
                + ", so its kernels cannot be told apart"))
            continue
        order = markers.index(i)
        previous = markers[order - 1] if order else None
        if previous != (i - 1 if i else None):
            out.append(NcuUnavailable(
                f"hbm_bytes unavailable: {count}; point {i}'s kernels cannot be told apart "
                f"from those of the point before it"
                + (f" (marker {i - 1} missing or out of order)" if i else
                   " (a marker precedes point 0's)")))
            continue
        try:
            out.append(groups[where[0]].total())
        except NcuUnavailable as exc:
            out.append(NcuUnavailable(f"hbm_bytes unavailable: {exc}"))
    return out


def command(ncu: str, point_json: str, python: str | None = None) -> list[str]:
    """The ncu command line that profiles one call of a point (one_call's single-point form)."""
    return _ncu_args(ncu) + [python or sys.executable, "-m", "cuflash.experiments.one_call",
                             point_json]


def batch_command(ncu: str, points_file: str, status_file: str,
                  python: str | None = None) -> list[str]:
    """The ncu command line that profiles one call of each point listed in ``points_file``."""
    return _ncu_args(ncu) + [python or sys.executable, "-m", "cuflash.experiments.one_call",
                             "--points", str(points_file), "--status", str(status_file)]


def _ncu_args(ncu: str) -> list[str]:
    return [ncu, "--clock-control", "none", "--profile-from-start", "off",
            "--metrics", ",".join(METRICS), "--csv", "--print-units", "base"]


def read_status(path) -> dict[int, dict]:
    """one_call's status lines by point index (a torn last line is ignored)."""
    statuses: dict[int, dict] = {}
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return statuses
    for line in text.splitlines():
        try:
            st = json.loads(line)
            statuses[int(st["index"])] = st
        except (ValueError, KeyError, TypeError):
            continue
    return statuses


def _run(cmd: list[str], env: dict, timeout_s: float) -> tuple[int, str, str]:
    """Run cmd in its own process group; on timeout or interrupt kill that group (ncu and the
    program it profiles) and re-raise."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.communicate()
        raise
    return proc.returncode, out, err


def measure_hbm_many(point_jsons: list[str], timeout_s: float = 600.0
                     ) -> list[NcuBytes | NcuUnavailable]:
    """DRAM bytes of one call of each point, all profiled by one ncu process.

    Returns one entry per point, in order: its ``NcuBytes``, or an ``NcuUnavailable`` whose
    message is the row's note (ncu missing, ncu failed or timed out, the point's call failed under
    ncu, its kernels could not be attributed). ``timeout_s`` is per point: the process may run
    ``len(point_jsons) * timeout_s`` seconds. Never raises except on KeyboardInterrupt.
    """
    n = len(point_jsons)
    if n == 0:
        return []
    ncu = find_ncu()
    if ncu is None:
        return [NcuUnavailable("hbm_bytes unavailable: ncu not found") for _ in range(n)]
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])      # the folder holding the cuflash package
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    total_s = timeout_s * n
    with tempfile.TemporaryDirectory(prefix="cuflash_ncu_") as tmp:
        points_file, status_file = Path(tmp) / "points.json", Path(tmp) / "status.jsonl"
        points_file.write_text(json.dumps(list(point_jsons)))
        try:
            rc, out, err = _run(batch_command(ncu, str(points_file), str(status_file)), env,
                                total_s)
        except subprocess.TimeoutExpired:
            return [NcuUnavailable(f"hbm_bytes unavailable: ncu took over {total_s:.0f} s "
                                   f"for {n} point{'s' * (n != 1)}") for _ in range(n)]
        except OSError as exc:
            return [NcuUnavailable(f"hbm_bytes unavailable: cannot start ncu: {exc}")
                    for _ in range(n)]
        statuses = read_status(status_file)
    failed = ""
    if rc != 0:
        tail = (err.strip() or out.strip()).splitlines()[-3:]
        failed = f"ncu exited {rc}: " + " | ".join(tail)
    try:
        groups = split_ncu_csv(out)
    except NcuUnavailable as exc:
        errs = [ln for ln in (out + err).splitlines() if "==ERROR==" in ln
                or "==WARNING==" in ln][:2]
        note = f"hbm_bytes unavailable: {failed or exc}" + (
            f" ({' | '.join(errs)})" if errs else "")
        return [NcuUnavailable(note) for _ in range(n)]
    results = attribute(groups, n, statuses)
    if failed:      # points ncu could not attribute say why the process failed
        results = [r if isinstance(r, NcuBytes) else NcuUnavailable(f"{r} ({failed})")
                   for r in results]
    return results


def measure_hbm(point_json: str, timeout_s: float = 600.0) -> NcuBytes:
    """Run one_call under ncu for one point and return the DRAM bytes of its measured call;
    NcuUnavailable (the note for the row) when that is impossible."""
    (result,) = measure_hbm_many([point_json], timeout_s)
    if isinstance(result, NcuUnavailable):
        raise result
    return result
