"""Run exactly one call of each of several points, for Nsight Compute (``ncu.measure_hbm_many``).

    python -m cuflash.experiments.one_call --points FILE --status FILE [--seed N]
    python -m cuflash.experiments.one_call --status FILE [--seed N] '<Point JSON>' ...
    python -m cuflash.experiments.one_call '<Point JSON>' [seed]        # one point, no marker

``--points FILE``: a JSON list of points (each a Point JSON string or object), run in that order
after any given on the command line. For each point: its inputs are made on the host and copied
to the GPU and the call is built (the backward's out and lse, torch's forward graph: computed
here, before profiling); then, between cudaProfilerStart and cudaProfilerStop, the measured call
runs once with no warm-up, followed by the marker kernel ``cuflash_ncu_marker`` launched with
grid (index + 1, 1, 1); then the point's memory is freed. Under ``ncu --profile-from-start off``
every kernel reported is one of the measured calls or a marker, and the kernels before marker i
(after marker i - 1) are point i's.

A point that fails (out of memory, any exception) does not stop the others: its profiled range
still ends with its marker, so the grouping stays aligned, and its status line says what failed.
With ``--status FILE`` one JSON line per point is appended to FILE as each point ends:
``{"index": i, "ok": true|false, "error": "Type: message" or null, "marker": true|false}``
(``marker``: whether the marker launch succeeded). The exit status is 0 when every point was
tried, whatever their outcome. Without ``--status`` (the single-point form used by
``tests/l2_probe.py``) no marker runs and a failure is an exception, as before.

Nothing is printed on stdout (ncu's CSV goes there): Python-level output is sent to stderr.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys

from .measure import build_call, free_device_memory, make_inputs
from .ncu import MARKER
from .points import Point

_MARKER_SRC = f'extern "C" __global__ void {MARKER}() {{}}'


class Gpu:
    """The few device operations the loop needs (a fake replaces it in the CPU tests)."""

    def __init__(self):
        import cupy
        self.cupy = cupy
        self._marker = cupy.RawKernel(_MARKER_SRC, MARKER)

    def synchronize(self) -> None:
        self.cupy.cuda.Device().synchronize()

    def profiler_start(self) -> None:
        self.cupy.cuda.profiler.start()

    def profiler_stop(self) -> None:
        self.cupy.cuda.profiler.stop()

    def marker(self, index: int) -> None:
        """Launch the marker with grid (index + 1, 1, 1): ncu's 'Grid Size' names the point."""
        self._marker((index + 1,), (1,), ())

    def free(self) -> None:
        free_device_memory()


def _error(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:400]


def run_points(point_jsons: list[str], seed: int, status_file, gpu, marker: bool = True) -> None:
    """Profile one call per point in order (see the module docstring); ``status_file`` is an open
    text file (or None) that receives one JSON line per point."""
    if marker:
        gpu.marker(0)            # compile and load the marker before any profiled range
        gpu.synchronize()
    for index, text in enumerate(point_jsons):
        error = None
        call = inputs = result = None
        try:
            point = Point.from_json(text)
            if point.device != "gpu":
                raise ValueError(f"{point.describe()} does not run on the GPU")
            inputs = make_inputs(point, seed, on_host=True)
            call = build_call(point, inputs)
            gpu.synchronize()
        except Exception as exc:
            if status_file is None:
                raise
            error = _error(exc)
            call = None
        marked = False
        gpu.profiler_start()
        try:
            if call is not None:
                try:
                    result = call.fn()
                    gpu.synchronize()
                except Exception as exc:
                    if status_file is None:
                        raise
                    error = _error(exc)
            if marker:
                try:
                    gpu.marker(index)
                    gpu.synchronize()
                    marked = True
                except Exception as exc:
                    error = error or f"marker launch failed: {_error(exc)}"
        finally:
            gpu.profiler_stop()
        del call, inputs, result
        try:
            gpu.free()
        except Exception:
            pass
        if status_file is not None:
            status_file.write(json.dumps({"index": index, "ok": error is None, "error": error,
                                          "marker": marked}) + "\n")
            status_file.flush()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m cuflash.experiments.one_call",
                                description="Profile one call per point under ncu.")
    p.add_argument("points", nargs="*", help="Point JSON (a trailing integer: the seed, old form)")
    p.add_argument("--points", dest="points_file", metavar="FILE",
                   help="JSON list of points, run after those on the command line")
    p.add_argument("--status", metavar="FILE", help="append one JSON line per point; markers on")
    p.add_argument("--seed", type=int, default=None)
    return p


def main(argv=None, gpu=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    args = _parser().parse_args(argv)
    points = list(args.points)
    seed = args.seed
    if points and points[-1].lstrip("-").isdigit():        # old form: '<json>' seed
        seed = int(points.pop()) if seed is None else seed
    if args.points_file:
        with open(args.points_file) as f:
            points += [p if isinstance(p, str) else json.dumps(p) for p in json.load(f)]
    if not points:
        print("one_call: no points given", file=sys.stderr)
        return 2
    with contextlib.redirect_stdout(sys.stderr):
        if gpu is None:
            gpu = Gpu()
        if args.status:
            with open(args.status, "a") as status:
                run_points(points, seed or 0, status, gpu, marker=True)
        else:
            run_points(points, seed or 0, None, gpu, marker=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
