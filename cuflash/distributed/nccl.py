"""NCCL communicator for ring attention: one GPU per process, through ``cupy.cuda.nccl``.

Start-up (:meth:`NcclComm.from_env`), the way GPU clusters run jobs:

* ``mpirun -np N python script.py`` (Open MPI, MPICH, anything that sets OMPI_COMM_WORLD_SIZE,
  PMI_SIZE or PMIX_RANK): rank and world size from MPI (mpi4py); rank 0 makes the NCCL unique
  id and broadcasts it with a non-blocking MPI broadcast that is timed out;
* RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT in the environment (torchrun, SLURM
  scripts, a hand launch): rank 0 listens on MASTER_PORT and hands the id to every other rank
  over TCP (a one-line JSON exchange; every rank checks the others' world size);
* neither: one process, world_size 1.

The process uses GPU LOCAL_RANK (or the only GPU it sees, under a launcher that sets
CUDA_VISIBLE_DEVICES per process). Nothing assumes one node: the ranks find each other through
MASTER_ADDR or MPI, and NCCL picks the transport (NVLink, PCIe, InfiniBand, sockets).

Every wait is bounded (``timeout`` seconds, default CUFLASH_DIST_TIMEOUT or 300): the
rendezvous, ncclCommInitRank (run in a helper thread, since NCCL cannot time it out itself),
and every transfer, whose completion is polled together with ncclCommGetAsyncError; on a time-out
or an NCCL error the communicator is aborted and :class:`CommError` says which step and rank.

NCCL_NVLS_ENABLE=0 is set in the environment before NCCL starts: the ring uses point-to-point
sends only, and NVLink SHARP multicast, which NVLS enables, must stay off on shared machines.

CuPy, NCCL and mpi4py are imported only when a communicator is made, so importing this module
works on a machine with none of them.
"""
from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time

import numpy as np

from .comm import CommError

DEFAULT_TIMEOUT = 300.0
_MAGIC = "cuflash-ring-rendezvous-1"
_MPI_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")
_GATHER_BYTES = 16384


def _timeout(timeout) -> float:
    if timeout is None:
        timeout = os.environ.get("CUFLASH_DIST_TIMEOUT", DEFAULT_TIMEOUT)
    try:
        t = float(timeout)
    except (TypeError, ValueError):
        raise ValueError(f"timeout={timeout!r} must be a number of seconds > 0 (or set "
                         f"CUFLASH_DIST_TIMEOUT)") from None
    if not t > 0:
        raise ValueError(f"timeout={timeout!r} must be > 0 seconds")
    return t


def nvls_off():
    """Keep NVLink SHARP (multicast) off in NCCL: set before NCCL reads its environment."""
    os.environ["NCCL_NVLS_ENABLE"] = "0"


def _cupy_nccl():
    """(cupy, cupy.cuda.nccl), or CommError saying what is missing."""
    nvls_off()
    try:
        import cupy
        from cupy.cuda import nccl
    except Exception as exc:  # ImportError or a broken CUDA install
        raise CommError(f"NcclComm needs CuPy with NCCL: importing cupy.cuda.nccl failed "
                        f"({type(exc).__name__}: {exc})") from exc
    if not getattr(nccl, "available", False):
        raise CommError("NcclComm needs NCCL, which CuPy could not load (libnccl.so.2): "
                        "pip install nvidia-nccl-cu12 / nvidia-nccl-cu13 matching CuPy's CUDA")
    return cupy, nccl


def id_to_bytes(uid) -> bytes:
    """An NCCL unique id as 128 bytes, from CuPy's ``nccl.get_unique_id()`` (a tuple of 128
    signed chars in CuPy 13, bytes in CuPy 14)."""
    if isinstance(uid, (bytes, bytearray)):
        return bytes(uid)
    return bytes(int(x) & 0xFF for x in uid)


def id_from_bytes(data: bytes) -> tuple:
    """The tuple ``NcclCommunicator`` takes, from :func:`id_to_bytes`'s bytes."""
    if len(data) != 128:
        raise CommError(f"an NCCL unique id has 128 bytes, got {len(data)}")
    return tuple(b - 256 if b > 127 else b for b in data)


def _env_int(name, default=None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        if default is None:
            raise ValueError(f"environment variable {name} is not set")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} must be an int") from None


def detect_launcher() -> str:
    """'mpi' under mpirun/srun with PMI, 'env' with RANK and WORLD_SIZE set, else 'single'."""
    if any(v in os.environ for v in _MPI_VARS):
        return "mpi"
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return "env"
    return "single"


# -- rendezvous: MPI ------------------------------------------------------------------------------

def _poll(test, deadline, message):
    delay = 1e-4
    while not test():
        if time.monotonic() > deadline:
            raise CommError(message())
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def rendezvous_mpi(make_id, timeout, set_device):
    """(rank, world_size, uid bytes) under mpirun: ``set_device(local_rank)`` is called before
    rank 0 runs ``make_id()``; the id goes to every rank by MPI_Ibcast, polled until
    ``timeout``."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        found = ", ".join(v for v in _MPI_VARS if v in os.environ)
        raise CommError(f"launched by an MPI launcher ({found} set) but mpi4py is not "
                        f"importable ({exc}): pip install mpi4py, or launch with RANK / "
                        f"WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT") from exc
    deadline = time.monotonic() + timeout
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    local = None
    for var in ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                "SLURM_LOCALID", "LOCAL_RANK"):
        if var in os.environ:
            local = _env_int(var)
            break
    if local is None:
        node = world.Split_type(MPI.COMM_TYPE_SHARED)
        local = node.Get_rank()
        node.Free()
    set_device(local)
    buf = np.zeros(1 + 128 + 1024, dtype=np.uint8)   # status, id, error text
    if rank == 0:
        try:
            buf[1:129] = np.frombuffer(id_to_bytes(make_id()), dtype=np.uint8)
            buf[0] = 1
        except Exception as exc:                      # tell the others, then fail everywhere
            msg = f"{type(exc).__name__}: {exc}".encode()[:1024]
            buf[129:129 + len(msg)] = np.frombuffer(msg, dtype=np.uint8)
            buf[0] = 2
    req = world.Ibcast([buf, MPI.BYTE], root=0)
    _poll(req.Test, deadline, lambda: (
        f"rank {rank} of {size}: the MPI broadcast of the NCCL id from rank 0 did not complete "
        f"within {timeout:g} s (rank 0 stuck or dead?)"))
    if buf[0] != 1:
        text = bytes(buf[129:]).rstrip(b"\0").decode(errors="replace")
        raise CommError(f"rank {rank}: rank 0 could not create the NCCL id: {text}")
    return rank, size, local, bytes(buf[1:129])


# -- rendezvous: TCP --------------------------------------------------------------------------

def _send_line(conn, obj):
    conn.sendall(json.dumps(obj).encode() + b"\n")


def _read_line(conn, limit=65536) -> dict:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            raise ConnectionError("connection closed before a full message")
        data += chunk
        if len(data) > limit:
            raise ValueError("message too long")
    return json.loads(data)


def rendezvous_tcp(rank, world_size, addr, port, make_id, timeout) -> bytes:
    """The NCCL id, handed out by rank 0 over TCP: rank 0 listens on ``port`` (all interfaces),
    the others connect to ``addr:port`` (retrying until rank 0 is up), send their rank and world
    size, and get the id once every rank has joined, or the error (a duplicate rank, another
    world size) that makes every rank fail. Bounded by ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    hello = {"magic": _MAGIC, "rank": rank, "world_size": world_size}
    if rank == 0:
        uid, err = None, None
        try:
            uid = id_to_bytes(make_id())
        except Exception as exc:
            err = f"rank 0 could not create the NCCL id: {type(exc).__name__}: {exc}"
        if world_size == 1:
            if err:
                raise CommError(err)
            return uid
        try:
            srv = socket.create_server(("", port))
        except OSError as exc:
            raise CommError(f"rank 0 could not listen on MASTER_PORT={port}: {exc} (another "
                            f"job, or a launcher's own store, may hold the port: choose a free "
                            f"MASTER_PORT)") from exc
        joined = []                                  # (connection, rank) of every joiner
        problems = [err] if err else []

        def reply_all(msg):
            for conn, _ in joined:
                try:
                    _send_line(conn, msg)
                except OSError:
                    pass

        try:
            while len(joined) < world_size - 1:
                left = deadline - time.monotonic()
                if left <= 0:
                    ranks = {r for _, r in joined}
                    missing = sorted(set(range(1, world_size)) - ranks)
                    problems.append(f"only {len(joined) + 1} of {world_size} ranks joined the "
                                    f"rendezvous on port {port} within {timeout:g} s; missing "
                                    f"ranks {missing}")
                    break
                srv.settimeout(left)
                try:
                    conn, peer = srv.accept()
                except socket.timeout:
                    continue
                try:
                    conn.settimeout(max(0.1, min(left, 10.0)))
                    msg = _read_line(conn)
                except (OSError, ValueError):
                    conn.close()                     # not one of ours, or gone
                    continue
                if not isinstance(msg, dict) or msg.get("magic") != _MAGIC:
                    conn.close()
                    continue
                r = msg.get("rank")
                if msg.get("world_size") != world_size:
                    problems.append(f"rank {r!r} (from {peer[0]}) has WORLD_SIZE="
                                    f"{msg.get('world_size')!r}, rank 0 has {world_size}")
                elif isinstance(r, bool) or not isinstance(r, int) or not 1 <= r < world_size:
                    problems.append(f"a process from {peer[0]} has RANK={r!r}, not in "
                                    f"1..{world_size - 1}")
                elif any(r == x for _, x in joined):
                    problems.append(f"two processes have RANK={r}")
                joined.append((conn, r))
            err = "; ".join(problems) or None
            reply_all({"ok": err is None, "id": uid.hex() if uid else None, "error": err})
        finally:
            for conn, _ in joined:
                conn.close()
            srv.close()
        if err:
            raise CommError(f"rank 0: the rendezvous failed: {err}")
        return uid
    last = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise CommError(f"rank {rank}: could not complete the rendezvous with rank 0 at "
                            f"MASTER_ADDR={addr} MASTER_PORT={port} within {timeout:g} s "
                            f"(last problem: {last}); check that rank 0 runs and the address "
                            f"is reachable from this node")
        try:
            conn = socket.create_connection((addr, port), timeout=min(left, 10.0))
        except OSError as exc:
            last = f"{type(exc).__name__}: {exc}"
            time.sleep(min(0.2, max(left, 0)))
            continue
        try:
            conn.settimeout(left)
            _send_line(conn, hello)
            reply = _read_line(conn)
        except socket.timeout:
            raise CommError(f"rank {rank}: reached rank 0 at {addr}:{port}, but not every one of "
                            f"the {world_size} ranks joined within {timeout:g} s") from None
        except (OSError, ValueError) as exc:
            last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.2)
            continue
        finally:
            conn.close()
        if not reply.get("ok"):
            raise CommError(f"rank {rank}: the rendezvous failed: {reply.get('error')}")
        return bytes.fromhex(reply["id"])


# -- the communicator -------------------------------------------------------------------------

class _Pending:
    """A posted shift: ``wait()`` polls its completion (bounded), makes the current stream wait
    for it, and returns the received arrays."""

    def __init__(self, owner, send, recv, done, what):
        self._owner, self._send, self._recv, self._done, self._what = owner, send, recv, done, what

    def wait(self) -> list:
        if self._recv is None:
            raise CommError(f"{self._what}: wait() called twice")
        self._owner._wait_event(self._done, self._what)
        self._owner._cupy.cuda.get_current_stream().wait_event(self._done)
        recv, self._send, self._recv = self._recv, None, None   # the stream now orders reuse
        return recv


class NcclComm:
    """One rank of a ring over NCCL: one process, one GPU (see the module docstring).

    ``NcclComm.from_env()`` sets up from mpirun or the RANK/WORLD_SIZE environment;
    ``NcclComm(rank, world_size, unique_id, device=...)`` takes an id shared by other means
    (:func:`id_to_bytes` of ``cupy.cuda.nccl.get_unique_id()`` on one rank). Transfers run on the
    communicator's own non-blocking stream (``stream``), ordered after the work queued on the
    caller's current stream when they are posted, so local kernels overlap them; ``wait()``
    makes the current stream wait for them. ``close()`` (or ``with``) releases NCCL.
    """

    def __init__(self, rank, world_size, unique_id, *, device=None, timeout=None):
        cupy, nccl = _cupy_nccl()
        self._cupy, self._nccl = cupy, nccl
        for name, v in (("rank", rank), ("world_size", world_size)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name}={v!r} must be an int")
        if not (world_size >= 1 and 0 <= rank < world_size):
            raise ValueError(f"rank={rank}, world_size={world_size}: need 0 <= rank < world_size")
        self.rank, self.world_size = int(rank), int(world_size)
        self.timeout = _timeout(timeout)
        uid = id_from_bytes(unique_id if isinstance(unique_id, (bytes, bytearray))
                            else id_to_bytes(unique_id))
        self.device = cupy.cuda.Device(cupy.cuda.runtime.getDevice() if device is None else device)
        self.device.use()
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.next, self.prev = (self.rank + 1) % self.world_size, (self.rank - 1) % self.world_size
        self._ops = 0
        self._comm = None
        self._comm = self._init_comm(uid)
        got = self.allgather({"rank": self.rank, "world_size": self.world_size})
        if [g["rank"] for g in got] != list(range(self.world_size)) or \
                any(g["world_size"] != self.world_size for g in got):
            self.abort()
            raise CommError(f"rank {self.rank}: the ranks disagree on the ring: {got}")

    @classmethod
    def from_env(cls, *, timeout=None, launcher=None) -> "NcclComm":
        """A communicator from the launcher's environment (module docstring). ``launcher``:
        'mpi', 'env' or 'single' to skip the detection (``detect_launcher``)."""
        cupy, nccl = _cupy_nccl()
        timeout = _timeout(timeout)
        kind = launcher or detect_launcher()
        if kind not in ("mpi", "env", "single"):
            raise ValueError(f"launcher={launcher!r} must be 'mpi', 'env', 'single' or None")
        try:
            n_dev = cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:
            raise CommError(f"NcclComm needs a CUDA GPU: {type(exc).__name__}: {exc}") from exc
        if n_dev < 1:
            raise CommError("NcclComm needs a CUDA GPU: none is visible")
        box = {}

        def set_device(local_rank):
            if n_dev == 1:
                dev = 0                      # one GPU per process made visible by the launcher
            elif 0 <= local_rank < n_dev:
                dev = local_rank
            else:
                raise CommError(f"local rank {local_rank} has no GPU of its own: {n_dev} visible "
                                f"(one process per GPU: start at most {n_dev} ranks per node)")
            box["device"] = dev
            cupy.cuda.Device(dev).use()

        if kind == "mpi":
            rank, world, _, uid = rendezvous_mpi(nccl.get_unique_id, timeout, set_device)
        elif kind == "env":
            rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
            set_device(_env_int("LOCAL_RANK", rank % n_dev))
            if world > 1:
                addr = os.environ.get("MASTER_ADDR")
                if not addr:
                    raise ValueError("MASTER_ADDR is not set: the address of rank 0's node, "
                                     "which every rank can reach")
                port = _env_int("MASTER_PORT")
            else:
                addr, port = None, None
            uid = rendezvous_tcp(rank, world, addr, port, nccl.get_unique_id, timeout)
        else:
            rank, world = 0, 1
            set_device(0)
            uid = id_to_bytes(nccl.get_unique_id())
        return cls(rank, world, uid, device=box["device"], timeout=timeout)

    # -- set-up and failure -------------------------------------------------------------------

    def _init_comm(self, uid):
        box = {}
        dev = self.device.id

        def target():
            try:
                self._cupy.cuda.Device(dev).use()
                try:    # CuPy 14 takes the id as bytes, CuPy 13 as a tuple of signed chars
                    comm = self._nccl.NcclCommunicator(self.world_size, id_to_bytes(uid),
                                                       self.rank)
                except TypeError:
                    comm = self._nccl.NcclCommunicator(self.world_size, uid, self.rank)
                box["comm"] = comm
            except BaseException as exc:       # noqa: BLE001 - reported below
                box["error"] = exc

        t = threading.Thread(target=target, name=f"nccl-init-rank{self.rank}", daemon=True)
        t.start()
        t.join(self.timeout)
        if t.is_alive():
            raise CommError(f"rank {self.rank}: NCCL communicator set-up (ncclCommInitRank, "
                            f"{self.world_size} ranks, GPU {dev}) did not complete within "
                            f"{self.timeout:g} s: a rank did not join, or the ranks cannot reach "
                            f"each other (NCCL_DEBUG=INFO shows the transport; "
                            f"NCCL_SOCKET_IFNAME picks the network interface)")
        if "error" in box:
            raise CommError(f"rank {self.rank}: NCCL communicator set-up failed: "
                            f"{type(box['error']).__name__}: {box['error']}") from box["error"]
        return box["comm"]

    def _live(self, what):
        if self._comm is None:
            raise CommError(f"rank {self.rank}: {what}: the NCCL communicator was closed or "
                            f"aborted after an earlier failure")
        return self._comm

    def abort(self):
        """Abort NCCL's pending operations and release the communicator (after a failure)."""
        comm, self._comm = self._comm, None
        if comm is not None:
            try:
                comm.abort()
            except Exception:
                pass

    def close(self):
        """Wait for this rank's transfers and release the communicator."""
        comm, self._comm = self._comm, None
        if comm is not None:
            self.stream.synchronize()
            comm.destroy()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()
        else:
            self.abort()

    def _fail(self, message, cause=None):
        self.abort()
        raise CommError(f"rank {self.rank}: {message}; the NCCL communicator was aborted") \
            from cause

    def _wait_event(self, event, what):
        """Poll ``event`` until done, NCCL's asynchronous errors and the time-out alongside."""
        deadline = time.monotonic() + self.timeout
        comm = self._live(what)
        i = 0
        while not event.done:
            i += 1
            if i % 32 == 0:
                try:
                    comm.check_async_error()
                except Exception as exc:
                    self._fail(f"{what} failed: {exc}", exc)
            if time.monotonic() > deadline:
                self._fail(f"{what} did not complete within {self.timeout:g} s (a peer died, "
                           f"hangs, or stopped calling the same ring operations)")
            time.sleep(0 if i < 64 else 1e-4)

    # -- operations -----------------------------------------------------------------------------

    def shift(self, arrays) -> _Pending:
        """Send each CuPy array to rank + 1 and receive same-shaped ones from rank - 1, as one
        NCCL group on ``stream``, after the work already queued on the current stream."""
        cp, nccl = self._cupy, self._nccl
        self._ops += 1
        what = f"shift #{self._ops} (to rank {self.next}, from rank {self.prev})"
        comm = self._live(what)
        arrays = list(arrays)
        for n, a in enumerate(arrays):
            if not isinstance(a, cp.ndarray):
                raise TypeError(f"NcclComm.shift sends CuPy arrays; item {n} is a "
                                f"{type(a).__name__}")
        send = [cp.ascontiguousarray(a) for a in arrays]
        recv = [cp.empty(a.shape, dtype=a.dtype) for a in send]
        ready = cp.cuda.Event(disable_timing=True)
        ready.record()                          # current stream: inputs written, buffers free
        self.stream.wait_event(ready)
        if self.world_size == 1:
            with self.stream:
                for a, b in zip(send, recv):
                    b[...] = a
        else:
            try:
                nccl.groupStart()
                try:
                    for a in send:
                        if a.nbytes:
                            comm.send(a.data.ptr, a.nbytes, nccl.NCCL_UINT8, self.next,
                                      self.stream.ptr)
                    for b in recv:
                        if b.nbytes:
                            comm.recv(b.data.ptr, b.nbytes, nccl.NCCL_UINT8, self.prev,
                                      self.stream.ptr)
                finally:
                    nccl.groupEnd()
            except Exception as exc:
                self._fail(f"{what} could not be posted: {exc}", exc)
        done = cp.cuda.Event(disable_timing=True)
        done.record(self.stream)
        return _Pending(self, send, recv, done, what)

    def allgather(self, obj) -> list:
        """Every rank's JSON-able ``obj`` (at most 16 KiB as JSON), in rank order, through
        ncclAllGather on ``stream``; waits (bounded) for the result."""
        cp, nccl = self._cupy, self._nccl
        self._ops += 1
        what = f"allgather #{self._ops}"
        comm = self._live(what)
        data = json.dumps(obj).encode()
        buf = np.zeros(_GATHER_BYTES, dtype=np.uint8)
        fits = len(data) <= _GATHER_BYTES - 4
        buf[:4] = np.frombuffer(struct.pack("<I", len(data) if fits else 0xFFFFFFFF), np.uint8)
        if fits:
            buf[4:4 + len(data)] = np.frombuffer(data, dtype=np.uint8)
        with self.stream:
            send = cp.asarray(buf)
            recv = cp.empty(_GATHER_BYTES * self.world_size, dtype=np.uint8)
        try:
            comm.allGather(send.data.ptr, recv.data.ptr, _GATHER_BYTES, nccl.NCCL_UINT8,
                           self.stream.ptr)
        except Exception as exc:
            self._fail(f"{what} could not be posted: {exc}", exc)
        done = cp.cuda.Event(disable_timing=True)
        done.record(self.stream)
        self._wait_event(done, what)
        host = recv.get(stream=self.stream).reshape(self.world_size, _GATHER_BYTES)
        out = []
        for r in range(self.world_size):
            (n,) = struct.unpack("<I", host[r, :4].tobytes())
            if n == 0xFFFFFFFF:
                raise CommError(f"rank {self.rank}: {what}: rank {r}'s object is longer than "
                                f"{_GATHER_BYTES - 4} bytes of JSON")
            out.append(json.loads(host[r, 4:4 + n].tobytes()))
        return out

    def __repr__(self):
        return (f"NcclComm(rank={self.rank}, world_size={self.world_size}, "
                f"device={getattr(self.device, 'id', None)})")


__all__ = ["NcclComm", "rendezvous_tcp", "rendezvous_mpi", "detect_launcher", "id_to_bytes",
           "id_from_bytes", "nvls_off", "DEFAULT_TIMEOUT"]
