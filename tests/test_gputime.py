"""The experiments' GPU timer (cuflash.experiments.gputime): each timed interval starts behind a
spin kernel long enough to hide the host's work for the call, the spin compiles, and the
experiments' measure step and the tools time through it. CPU only: CuPy is replaced by a fake
that logs what the timer asks of the GPU."""
from __future__ import annotations

import sys
import types

import pytest

from cuflash.experiments import gputime, measure
from cuflash.experiments.schema import Measure


class FakeCupy(types.ModuleType):
    """What gputime uses of CuPy, logging each call in order; an event pair reads 2 ms."""

    def __init__(self):
        super().__init__("cupy")
        self.log = []
        fake = self

        class Event:
            def __init__(self):
                self.id = len([x for x in fake.log if x[0] == "event"])
                fake.log.append(("event", self.id))

            def record(self, stream=None):
                fake.log.append(("record", self.id))

            def synchronize(self):
                fake.log.append(("wait", self.id))

        class Device:
            id = 0

            def synchronize(self):
                fake.log.append(("sync",))

        def raw_kernel(src, name):
            assert name == "cuflash_spin" and "globaltimer" in src
            return lambda grid, block, args: fake.log.append(("spin", int(args[0])))

        self.cuda = types.SimpleNamespace(Event=Event, Device=Device,
                                          get_elapsed_time=lambda a, b: 2.0)
        self.RawKernel = raw_kernel
        self.uint64 = int


@pytest.fixture
def fake_cupy(monkeypatch):
    fake = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(gputime, "_kernels", {})
    return fake


def test_the_spin_is_queued_before_the_first_event(fake_cupy):
    calls = []
    ms = gputime.gpu_ms(lambda: (calls.append(1), fake_cupy.log.append(("fn",))), calls=3,
                        lead_s=1e-3)
    assert ms == pytest.approx(2.0 / 3)
    kinds = [e[0] for e in fake_cupy.log if e[0] != "event"]
    assert kinds == ["spin", "record", "fn", "fn", "fn", "record", "wait"]
    assert fake_cupy.log[[e[0] for e in fake_cupy.log].index("spin")] == ("spin", 1_000_000)


def test_the_lead_comes_from_the_last_warmup_and_outlasts_it(fake_cupy, monkeypatch):
    host = iter([5.0, 1e-3, 2e-3])          # the first warm-up compiles: not the one used
    monkeypatch.setattr(gputime, "host_seconds", lambda fn, calls=1: next(host))
    times = gputime.gpu_times(lambda: None, repeats=4, warmup=3)
    assert times == [2.0] * 4
    spins = [e[1] for e in fake_cupy.log if e[0] == "spin"]
    assert spins == [int(gputime.LEAD_FACTOR * 2e-3 * 1e9)] * 4


def test_at_least_one_warmup_and_one_repeat(fake_cupy):
    n = []
    times = gputime.gpu_times(lambda: n.append(1), repeats=0, warmup=0)
    assert len(times) == 1 and len(n) == 2


def test_max_seconds_cuts_the_repeats_but_keeps_one(fake_cupy):
    assert len(gputime.gpu_times(lambda: None, repeats=50, warmup=1, max_seconds=0.0)) == 1


@pytest.mark.parametrize("host_s, lead", [(0.0, gputime.MIN_LEAD_S), (1e-3, 2e-3),
                                          (1.0, gputime.MAX_LEAD_S)])
def test_lead_seconds(host_s, lead):
    assert gputime.lead_seconds(host_s) == pytest.approx(lead)


def test_measure_times_gpu_calls_through_gputime(monkeypatch):
    seen = {}

    def fake_times(fn, repeats, warmup, max_seconds):
        seen.update(fn=fn, repeats=repeats, warmup=warmup, max_seconds=max_seconds)
        return [1.0, 2.0, 3.0]

    monkeypatch.setattr(gputime, "gpu_times", fake_times)
    fn = lambda: None
    call = types.SimpleNamespace(kind="cupy", fn=fn)
    row = measure.time_call(call, Measure(repeats=3, warmup=2, max_seconds=7.0))
    assert seen == dict(fn=fn, repeats=3, warmup=2, max_seconds=7.0)
    assert row["time_ms_median"] == pytest.approx(2.0) and row["repeats"] == 3


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_spin_kernel_compiles(arch):
    from cuflash.gpu import build
    report = build.compile_offline(gputime._SPIN_SOURCE, "cuflash_spin", arch)
    assert report.spill_stores == 0 and report.registers is not None


@pytest.mark.gpu
def test_host_work_before_the_launch_is_not_timed():
    """On the GPU: a call that sleeps 3 ms on the host, then queues 0.2 ms of GPU work, reads
    ~0.2 ms (the host's sleep hidden behind the lead spin), where the same call between two
    events on an idle GPU reads the sleep too; a readback inside the call still shows."""
    import time
    import cupy as cp

    def call():
        time.sleep(3e-3)
        gputime.spin(0.2e-3)

    ms = min(gputime.gpu_times(call, repeats=5, warmup=2))
    assert 0.15 < ms < 0.6, ms
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record()
    call()
    b.record()
    b.synchronize()
    assert cp.cuda.get_elapsed_time(a, b) > 2.5

    def syncing():
        gputime.spin(0.2e-3)
        cp.cuda.Device().synchronize()   # a readback's sync: the GPU idles for what follows
        time.sleep(2e-3)
        gputime.spin(0.2e-3)

    assert min(gputime.gpu_times(syncing, repeats=3, warmup=1)) > 2.0
