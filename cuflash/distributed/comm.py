"""What ring attention needs from a communicator, and a simulated ring of N ranks in one process.

A communicator is any object with

* ``rank`` and ``world_size`` (ints, 0 <= rank < world_size);
* ``shift(arrays) -> Pending``: one grouped step of the ring: send every array of the list to
  rank (rank + 1) mod world_size and receive, from rank (rank - 1) mod world_size, arrays of the
  same shapes and dtypes; ``Pending.wait()`` returns the received list. Between ``shift`` and
  ``wait`` the sent arrays must not be written (they may still be in flight) and the received
  ones not read, so that local work can run while the data moves. Every rank calls shift with
  the same shapes in the same order;
* ``allgather(obj) -> list``: a small JSON-able object from every rank, in rank order (used to
  check that all ranks agree on shapes and settings before any data moves).

Both raise :class:`CommError` rather than hang when a peer fails or does not answer in time.

:class:`SimulatedRing` runs N virtual ranks as N threads of one process (NumPy arrays: each rank
runs the CPU twin; CuPy arrays on one GPU work the same way). :class:`cuflash.distributed.NcclComm`
is the real thing: one GPU per process, NCCL.
"""
from __future__ import annotations

import json
import math
import numbers
import threading


class CommError(RuntimeError):
    """A communicator failed: a peer died, timed out, or the ranks called different operations."""


def check_comm(comm) -> tuple:
    """(rank, world_size) of a communicator, or TypeError / ValueError naming what is missing."""
    missing = [a for a in ("rank", "world_size", "shift", "allgather") if not hasattr(comm, a)]
    if missing:
        raise TypeError(f"comm={comm!r:.80} is not a communicator: it lacks {', '.join(missing)} "
                        f"(use cuflash.distributed.SimulatedRing(n).comms[rank] or NcclComm)")
    rank, world = comm.rank, comm.world_size
    for name, v in (("comm.rank", rank), ("comm.world_size", world)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{name}={v!r} must be an int")
    if not (world >= 1 and 0 <= rank < world):
        raise ValueError(f"comm.rank={rank} and comm.world_size={world}: need world_size >= 1 "
                         f"and 0 <= rank < world_size")
    return int(rank), int(world)


class _Done:
    """A Pending whose result is already known (used by SimulatedComm)."""

    def __init__(self, fn):
        self._fn, self._result, self._called = fn, None, False

    def wait(self) -> list:
        if not self._called:
            self._result, self._called = self._fn(), True
        return self._result


class _Broken(Exception):
    pass


class _Gate:
    """A reusable barrier of n threads. Unlike threading.Barrier, breaking it (a rank failed, or
    a wait timed out) never reaches threads that a completed generation already released."""

    def __init__(self, n):
        self.n, self.count, self.gen, self.broken = n, 0, 0, False
        self.cond = threading.Condition()

    def wait(self, timeout):
        """Return once all n threads arrived; raise _Broken('failed' | 'timeout') otherwise."""
        with self.cond:
            if self.broken:
                raise _Broken("failed")
            gen = self.gen
            self.count += 1
            if self.count == self.n:
                self.count, self.gen = 0, self.gen + 1
                self.cond.notify_all()
                return
            done = self.cond.wait_for(lambda: self.gen != gen or self.broken, timeout)
            if self.gen != gen:
                return
            self.broken = True           # a time-out breaks it for the others too
            self.cond.notify_all()
            raise _Broken("failed" if done else "timeout")

    def abort(self):
        with self.cond:
            self.broken = True
            self.cond.notify_all()

    def reset(self):
        with self.cond:
            self.broken, self.count = False, 0


class SimulatedComm:
    """Rank ``rank`` of a :class:`SimulatedRing` (see the module docstring for the operations)."""

    def __init__(self, ring: "SimulatedRing", rank: int):
        self._ring, self.rank, self.world_size = ring, rank, ring.world_size
        self._seq = 0

    def shift(self, arrays) -> _Done:
        """Post the arrays for rank + 1; the exchange itself happens in ``wait()``, which copies
        the arrays rank - 1 posted, so a sent array written before ``wait`` shows (as it could on
        a real network)."""
        arrays = list(arrays)
        seq = self._next()

        def exchange():
            shapes = [(tuple(a.shape), str(a.dtype)) for a in arrays]
            got = self._ring._exchange(self.rank, ("shift", seq, shapes), arrays)
            return got[(self.rank - 1) % self.world_size]

        return _Done(exchange)

    def allgather(self, obj) -> list:
        """Every rank's ``obj``, in rank order (through JSON, as a network would carry it)."""
        seq = self._next()
        text = json.dumps(obj)
        return [json.loads(t) for t in self._ring._exchange(self.rank, ("allgather", seq, None),
                                                            text)]

    def abort(self):
        """Break the ring: every rank waiting in (or later entering) an operation raises
        CommError at once (ring_attention calls this when it fails mid-ring)."""
        self._ring._gate.abort()

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    def __repr__(self):
        return f"SimulatedComm(rank={self.rank}, world_size={self.world_size})"


class RankErrors(RuntimeError):
    """Raised by :meth:`SimulatedRing.run` when some rank raised: ``errors[r]`` is rank r's
    exception or None."""

    def __init__(self, errors):
        self.errors = list(errors)
        lines = [f"rank {r}: {type(e).__name__}: {e}" for r, e in enumerate(self.errors)
                 if e is not None]
        super().__init__(f"{len(lines)} of {len(self.errors)} ranks failed:\n" + "\n".join(lines))


class SimulatedRing:
    """N virtual ranks in one process, as threads that meet at a barrier for every operation.

    ``SimulatedRing(n).comms[r]`` is rank r's communicator; ``run(fn, *per_rank_args)`` calls
    ``fn(comm, *args)`` for every rank in its own thread and returns the results in rank order.
    ``timeout`` (seconds) bounds every wait at the barrier: a rank that does not arrive (it died,
    or called a different operation) makes the others raise :class:`CommError`, not hang.
    """

    def __init__(self, world_size, *, timeout=60.0):
        if isinstance(world_size, bool) or not isinstance(world_size, numbers.Integral) \
                or world_size < 1:
            raise ValueError(f"world_size={world_size!r} must be an int >= 1")
        self.world_size = int(world_size)
        if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) \
                or not math.isfinite(timeout) or timeout <= 0:   # nan would wait forever
            raise ValueError(f"timeout={timeout!r} must be a finite number of seconds > 0")
        self.timeout = float(timeout)
        self._gate = _Gate(self.world_size)
        self._slots = [None] * self.world_size
        self.comms = [SimulatedComm(self, r) for r in range(self.world_size)]

    def _wait(self, rank, what):
        try:
            self._gate.wait(self.timeout)
        except _Broken as exc:
            why = (f"a rank did not arrive within {self.timeout:g} s" if str(exc) == "timeout"
                   else f"another rank failed (or did not arrive within {self.timeout:g} s)")
            raise CommError(f"rank {rank}: the simulated ring broke during {what}: {why}") \
                from None

    def _exchange(self, rank, tag, payload) -> list:
        """Post ``payload`` under ``tag``; return every rank's payload once all have posted."""
        self._slots[rank] = (tag, payload)
        what = f"{tag[0]} #{tag[1]}"
        self._wait(rank, what)
        tags = [s[0] for s in self._slots]
        got = [s[1] for s in self._slots]
        if any(t != tags[0] for t in tags):    # every rank sees the same tags: all raise
            self._wait(rank, what)
            raise CommError(f"rank {rank}: the ranks called different operations: "
                            + "; ".join(f"rank {r}: {t[0]} #{t[1]} {t[2] or ''}".rstrip()
                                        for r, t in enumerate(tags)))
        if tag[0] == "shift":       # copy out before the senders may go on
            src = (rank - 1) % self.world_size
            got = [None] * self.world_size
            got[src] = [a.copy() for a in self._slots[src][1]]
        self._wait(rank, what)
        return got

    def run(self, fn, *per_rank_args, return_exceptions=False) -> list:
        """[fn(comms[r], *(a[r] for a in per_rank_args)) for every rank r], each rank in its own
        thread. If a rank raises, the ring is broken (the others get CommError instead of
        waiting) and :class:`RankErrors` is raised with every rank's exception, unless
        ``return_exceptions``: then the list holds the exception in that rank's place."""
        n = self.world_size
        for i, a in enumerate(per_rank_args):
            if len(a) != n:
                raise ValueError(f"per_rank_args[{i}] has {len(a)} entries; need one per rank "
                                 f"({n})")
        results, errors = [None] * n, [None] * n

        def body(r):
            try:
                results[r] = fn(self.comms[r], *(a[r] for a in per_rank_args))
            except BaseException as exc:          # noqa: BLE001 - reported per rank
                errors[r] = exc
                self._gate.abort()

        threads = [threading.Thread(target=body, args=(r,), name=f"sim-rank-{r}", daemon=True)
                   for r in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self._gate.reset()                        # ready for another run
        if return_exceptions:
            return [e if e is not None else res for res, e in zip(results, errors)]
        if any(e is not None for e in errors):
            raise RankErrors(errors)
        return results


__all__ = ["CommError", "SimulatedRing", "SimulatedComm", "RankErrors", "check_comm"]
