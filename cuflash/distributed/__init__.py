"""cuflash.distributed: exact attention over a sequence split across ranks (context parallelism).

    >>> import numpy as np, cuflash
    >>> from cuflash.distributed import SimulatedRing, ring_attention, shard, unshard
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((2, 64, 16)).astype(np.float32) for _ in range(3))
    >>> ring = SimulatedRing(2)                    # 2 virtual ranks (threads), the CPU twin
    >>> parts = ring.run(lambda comm, q, k, v: ring_attention(q, k, v, comm=comm, causal=True),
    ...                  *([shard(x, 2, r) for r in range(2)] for x in (q, k, v)))
    >>> out = unshard(parts)                       # == cuflash.attention(q, k, v, causal=True)
    >>> out.shape
    (2, 64, 16)

Modules: ``layout`` (contiguous and zigzag slicing), ``plan`` (global mask -> the local calls of
each ring step), ``merge`` (the exact LSE merge), ``comm`` (the communicator protocol and the
simulated ring), ``nccl`` (NcclComm: NCCL through CuPy, started by mpirun or by RANK /
WORLD_SIZE / MASTER_ADDR / MASTER_PORT), ``ring`` (ring_attention and its backward).
Importing this package imports neither CuPy nor mpi4py.
"""
from .comm import CommError, RankErrors, SimulatedComm, SimulatedRing, check_comm
from .layout import (LAYOUTS, check_divisible, chunk_ranges, chunks_per_rank, local_positions,
                     shard, unshard)
from .merge import merge_all, merge_into, merge_partials
from .nccl import NcclComm, detect_launcher
from .plan import Call, pair_kinds, ring_plan, step_calls, work_per_rank
from .ring import RingResiduals, ring_attention, ring_attention_backward

__all__ = ["ring_attention", "ring_attention_backward", "RingResiduals", "SimulatedRing",
           "SimulatedComm", "NcclComm", "CommError", "RankErrors", "check_comm",
           "detect_launcher", "LAYOUTS", "chunk_ranges", "chunks_per_rank", "check_divisible",
           "local_positions", "shard", "unshard", "merge_all", "merge_partials", "merge_into",
           "Call", "step_calls", "ring_plan", "pair_kinds", "work_per_rank"]
