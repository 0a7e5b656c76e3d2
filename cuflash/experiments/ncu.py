"""Measured DRAM bytes of one point through Nsight Compute (``hbm_bytes``, issue #6).

The runner starts ``ncu … python -m cuflash.experiments.one_call '<point json>'``. one_call makes
the inputs (and, for a backward point, the forward's out and lse), then brackets exactly one call
of the measured method with cudaProfilerStart/Stop; ncu runs with ``--profile-from-start off``,
so every kernel it reports belongs to that call (CuPy's own elementwise kernels in naive included:
they are part of naive). Bytes are summed over those kernels.
"""
from __future__ import annotations

import csv
import dataclasses
import glob
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")
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


def find_ncu() -> str | None:
    """Path of the ncu executable: PATH, then /usr/local/cuda/bin, then /opt/nvidia/nsight-compute."""
    found = shutil.which("ncu")
    if found:
        return found
    candidates = ["/usr/local/cuda/bin/ncu"] + sorted(
        glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)
    return next((c for c in candidates if os.path.isfile(c) and os.access(c, os.X_OK)), None)


def parse_ncu_csv(text: str) -> NcuBytes:
    """Sum dram__bytes_read.sum and dram__bytes_write.sum over the kernels of ncu's CSV output.

    ``text`` is ncu's stdout with ``--csv``: '==PROF==' lines and the program's own output may
    surround the CSV; only lines starting with a double quote are read. One row per (kernel, metric);
    kernels are told apart by their 'ID' column. Values may carry thousands separators; units are
    converted to bytes (``--print-units base`` gives 'byte').
    """
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    header = next((i for i, ln in enumerate(lines) if '"Metric Name"' in ln), None)
    if header is None:
        raise NcuUnavailable("ncu printed no metrics table (no kernel was profiled?)")
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[header:]))))
    totals = {m: 0.0 for m in METRICS}
    kernels: dict[str, str] = {}
    for row in rows:
        metric = row.get("Metric Name")
        if metric not in totals:
            continue
        raw = (row.get("Metric Value") or "").replace(",", "").strip()
        try:
            value = float(raw)
        except ValueError:
            raise NcuUnavailable(f"ncu gave {metric}={raw!r} for kernel "
                                 f"{row.get('Kernel Name')!r}") from None
        unit = (row.get("Metric Unit") or "byte").strip().lower()
        if unit not in _UNITS:
            raise NcuUnavailable(f"unknown unit {unit!r} for {metric}")
        totals[metric] += value * _UNITS[unit]
        kernels[row.get("ID", str(len(kernels)))] = row.get("Kernel Name", "?")
    if not kernels:
        raise NcuUnavailable(f"ncu's table has none of the metrics {list(METRICS)}")
    return NcuBytes(int(round(totals[METRICS[0]])), int(round(totals[METRICS[1]])),
                    tuple(kernels.values()))


def command(ncu: str, point_json: str, python: str | None = None) -> list[str]:
    """The ncu command line that profiles one call of a point."""
    return [ncu, "--clock-control", "none", "--profile-from-start", "off",
            "--metrics", ",".join(METRICS), "--csv", "--print-units", "base",
            python or sys.executable, "-m", "cuflash.experiments.one_call", point_json]


def measure_hbm(point_json: str, timeout_s: float = 600.0) -> NcuBytes:
    """Run one_call under ncu and return the DRAM bytes of the measured call."""
    ncu = find_ncu()
    if ncu is None:
        raise NcuUnavailable("hbm_bytes unavailable: ncu not found")
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])      # the folder holding the cuflash package
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        proc = subprocess.run(command(ncu, point_json), capture_output=True, text=True, env=env,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise NcuUnavailable(f"hbm_bytes unavailable: ncu took over {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-3:]
        raise NcuUnavailable(f"hbm_bytes unavailable: ncu exited {proc.returncode}: "
                             + " | ".join(tail))
    try:
        return parse_ncu_csv(proc.stdout)
    except NcuUnavailable as exc:
        errs = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "==ERROR==" in ln
                or "==WARNING==" in ln][:2]
        raise NcuUnavailable(f"hbm_bytes unavailable: {exc}" + (
            f" ({' | '.join(errs)})" if errs else "")) from None
