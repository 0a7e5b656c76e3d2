"""Run exactly one call of one point, for Nsight Compute to profile (``ncu.measure_hbm``).

    python -m cuflash.experiments.one_call '<Point JSON>' [seed]

Inputs are made on the host and copied to the GPU; the backward's out and lse (and torch's
forward graph) are computed before profiling starts. Only the measured call runs between
cudaProfilerStart and cudaProfilerStop, with no warm-up, so under ``ncu --profile-from-start off``
every kernel reported is one of that call. Prints nothing on stdout (ncu's CSV goes there).
"""
from __future__ import annotations

import sys

from .measure import build_call, make_inputs
from .points import Point


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    point = Point.from_json(argv[0])
    seed = int(argv[1]) if len(argv) > 1 else 0
    if point.device != "gpu":
        print(f"one_call: {point.describe()} does not run on the GPU", file=sys.stderr)
        return 2
    import cupy

    inputs = make_inputs(point, seed, on_host=True)
    call = build_call(point, inputs)
    cupy.cuda.Device().synchronize()
    cupy.cuda.profiler.start()
    try:
        result = call.fn()
        cupy.cuda.Device().synchronize()
    finally:
        cupy.cuda.profiler.stop()
    del result
    return 0


if __name__ == "__main__":
    sys.exit(main())
