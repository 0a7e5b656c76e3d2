"""GPU time of a call, with the host ahead of the GPU: the one timing rule of the experiments and
of the tools in tools/.

A CUDA-event timing (record an event, call, record another) counts whatever the GPU does between
the two events, idle time included. Timed from an idle GPU, the first call's host work (argument
checks, the launch's parameters) runs while the GPU waits, so the timing adds one call's host
time to the kernels' (NOTES.md, v21: 0.25 ms of attention_varlen's checks and launch preparation
read as 5-10% of a 2.4-6 ms kernel). In a training or decoding loop the host runs ahead and that
time is hidden behind the GPU's previous work. So each timing here starts behind a short spin
kernel (``lead``, longer than the host's work for the call): the host prepares the call while
the GPU spins, the start event fires as the spin ends, and the interval holds the GPU's work on
the call and any gap the call itself opens (a call that reads a result back, a device sync,
still shows the idle time after the readback, as it should). triton's ``do_bench`` gets the same
effect from the cache flush it queues before each timed call.

The host's own time per call is a separate measurement (tests/host_overhead.py, issue 14's
decode steps).

    times = gpu_times(fn, repeats=10, warmup=3)        # ms per call, one per repeat
    ms = gpu_ms(fn, calls=3)                           # ms per call over one batch of calls

``fn`` launches on CuPy's current stream (torch calls on the legacy default stream as well: the
events and the spin are on the null stream, the same one). This module imports nothing of
cuflash, so that tools/ab_speed.py can time an older tree's calls with it.
"""
from __future__ import annotations

import time

#: The spin kernel: waits `ns` nanoseconds of the GPU's global timer (not its clock: the same
#: wall time at any SM clock). One thread.
_SPIN_SOURCE = r"""
extern "C" __global__ void cuflash_spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
"""

#: Lead time of the spin: this many times the host's time for the calls timed, at least
#: MIN_LEAD_S, at most MAX_LEAD_S
LEAD_FACTOR = 2.0
MIN_LEAD_S = 50e-6
MAX_LEAD_S = 20e-3

_kernels: dict = {}


def _spin_kernel(cp):
    dev = cp.cuda.Device().id
    if dev not in _kernels:
        _kernels[dev] = cp.RawKernel(_SPIN_SOURCE, "cuflash_spin")
    return _kernels[dev]


def spin(seconds: float) -> None:
    """Queue a kernel that keeps the GPU busy for ``seconds`` on the current stream (returns at
    once: the host goes on)."""
    import cupy as cp
    _spin_kernel(cp)((1,), (1,), (cp.uint64(max(0, int(seconds * 1e9))),))


def host_seconds(fn, calls: int = 1) -> float:
    """Wall time of the host's side of ``calls`` calls of ``fn`` (the GPU may still be busy
    when it returns), after a sync: what the spin must outlast."""
    import cupy as cp
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t = time.perf_counter() - t0
    cp.cuda.Device().synchronize()
    return t


def lead_seconds(host_s: float) -> float:
    """The spin's length for calls whose host side takes ``host_s`` seconds."""
    return min(MAX_LEAD_S, max(MIN_LEAD_S, LEAD_FACTOR * host_s))


def gpu_ms(fn, calls: int = 1, lead_s: float | None = None) -> float:
    """Milliseconds per call of ``calls`` calls of ``fn`` between CUDA events, the first event
    queued behind a spin of ``lead_s`` seconds (None: measured now, ``lead_seconds``)."""
    import cupy as cp
    if lead_s is None:
        lead_s = lead_seconds(host_seconds(fn, calls))
    a, b = cp.cuda.Event(), cp.cuda.Event()
    spin(lead_s)
    a.record()
    for _ in range(calls):
        fn()
    b.record()
    b.synchronize()
    return cp.cuda.get_elapsed_time(a, b) / calls


def gpu_times(fn, repeats: int = 10, warmup: int = 3, max_seconds: float = float("inf"),
              calls: int = 1) -> list[float]:
    """Milliseconds per call, one timing (``gpu_ms`` of ``calls`` calls) per repeat, after
    ``warmup`` untimed calls; fewer repeats (at least one) once ``max_seconds`` have passed.
    At least one warm-up call: the spin's lead comes from the host side of the last (the first
    may compile kernels)."""
    for _ in range(max(1, warmup)):
        host = host_seconds(fn, calls)
    lead = lead_seconds(host)
    times, start = [], time.perf_counter()
    for _ in range(max(1, repeats)):
        times.append(gpu_ms(fn, calls, lead))
        if time.perf_counter() - start > max_seconds:
            break
    return times
