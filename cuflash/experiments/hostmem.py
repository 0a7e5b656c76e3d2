"""Host memory: the bytes a CPU point needs, and the bytes this machine can give it.

A CPU point that needs more memory than the machine has is not a MemoryError: Linux overcommits,
and the OS kills the whole process (the runner and its unwritten state with it). So the runner
compares ``needed_bytes`` with ``available_bytes`` before it runs a CPU point and records an
'oom' row instead of running one that cannot fit.

``needed_bytes`` is an upper bound calibrated on ``tracemalloc`` peaks of NumPy runs (the test
``test_needed_bytes_bounds_the_measured_peak`` keeps it one): naive keeps up to about three T×S
matrices alive in its backward (P, dP and a product of them), each in its dtype and, for 16-bit
inputs, a float32 copy for the matrix products; the tiled twin keeps a few per-tile blocks and
float32/float64 copies of its inputs and outputs; the float64 oracle behind ``error_rel`` runs
naive in float64 when the point is within ``measure.error_limit`` (on ``measure.error_heads``'
sample alone when one is taken: ``measure.error_sample``).
"""
from __future__ import annotations

import os
from pathlib import Path

from .._xp import resolve_dtype

#: Bytes per score element kept alive at the peak, in units of max(itemsize, 4) (forward /
#: backward and both). Calibrated: measured 1.06 / 3.07 (float32, float64), up to 2.1 causal
#: forward; 16-bit inputs 3.3 / 4.4 in units of 2 bytes, i.e. 1.6 / 2.2 in units of 4.
NAIVE_SCORES = {"forward": 2.25, "backward": 3.25, "both": 3.25}
#: Slack for what tracemalloc does not see (BLAS work buffers, allocator rounding).
SLACK_BYTES = 64 << 20


def _itemsize(dtype: str) -> int:
    try:
        return resolve_dtype(dtype).itemsize
    except ValueError:           # bfloat16 without ml_dtypes: 2 bytes all the same
        return 2


def _naive_peak(bh: int, T: int, S: int, d: int, itemsize: int, pass_: str) -> int:
    unit = max(itemsize, 4)
    return int(NAIVE_SCORES[pass_] * bh * T * S * unit) + 8 * bh * (T + S) * d * unit


def _tiled_peak(point, itemsize: int) -> int:
    acc = 8 if itemsize == 8 else 4
    batch, heads, T, S = point.run_shape
    bh = batch * heads
    rows = bh * (T + S) * point.head_dim
    tiles = [t for t in point.tiles_used()] or [None]
    blocks = max((t.block_m * t.block_n if t else 128 * 128) for t in tiles)
    return 6 * rows * acc + 16 * bh * blocks * acc


def needed_bytes(point, error: bool = True, error_limit: int = 2 ** 24,
                 error_heads: int = 0) -> int:
    """Upper bound on the host bytes measuring ``point`` on the CPU allocates: its inputs, then
    the larger of the measured call's peak and (when ``error`` and the point is within
    ``error_limit`` scores) the float64 oracle's, on ``error_heads`` heads of one batch entry
    when that samples the point (``measure.error_sample``). A KV-cache point:
    ``decode.needed_bytes``."""
    if getattr(point, "cache", None):
        from .decode import needed_bytes as step_bytes
        return step_bytes(point, error, error_limit)
    e = _itemsize(point.dtype)
    batch, heads, T, S = point.run_shape          # the padded layout runs other shapes
    bh, d = batch * heads, point.head_dim
    tensors = 3 if point.pass_ == "forward" else 4          # q, k, v (, dout)
    inputs = tensors * bh * max(T, S) * d * e
    if point.method_name == "naive":
        peak = _naive_peak(bh, T, S, d, e, point.pass_)
    else:
        peak = _tiled_peak(point, e)
    from .measure import error_sample, error_scores
    if error and error_scores(point, error_heads) <= error_limit:
        sample = error_sample(point, error_heads)
        obh = bh if sample is None else sample[0]
        peak = max(peak, _naive_peak(obh, T, S, d, 8, point.pass_) + 2 * inputs * 8 // e)
    return inputs + peak + SLACK_BYTES


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_room() -> int | None:
    """Bytes left under this process's cgroup memory limit (v2 or v1), or None without one."""
    for limit, usage in (("memory.max", "memory.current"),
                         ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        lim = _read_int(Path("/sys/fs/cgroup") / limit)
        used = _read_int(Path("/sys/fs/cgroup") / usage)
        if lim is not None and used is not None and lim < (1 << 60):
            return max(lim - used, 0)
    return None


def available_bytes() -> int | None:
    """Memory the OS can give this process now without swapping: MemAvailable from
    /proc/meminfo, capped by the cgroup limit; None where neither can be read."""
    found = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except OSError:
        pass
    if not found:
        try:
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            pass
    room = _cgroup_room()
    if room is not None:
        found.append(room)
    return min(found) if found else None


__all__ = ["needed_bytes", "available_bytes"]
