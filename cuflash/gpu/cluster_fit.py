"""How many SMs thread-block clusters cover when each block takes a whole SM, from the driver's
``cuOccupancyMaxActiveClusters`` through ctypes (CuPy exposes no cluster occupancy call; the
same route as tma.py's tensor maps).

A cluster's blocks must run in one GPC at once, so clusters of C blocks cover only the SMs that
GPCs hold in whole groups of C: on an H100 SXM (132 SMs) clusters of 4 or 8 blocks of one block
an SM cover 120 SMs, clusters of 2 all 132. A grid of 128 blocks in clusters of 4 then stacks two
blocks on some SMs while 12 SMs idle (.ab/cluster_place.py, NOTES v106).
"""
from __future__ import annotations

import ctypes
import functools


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig (cuda.h)."""
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint),
                ("gridDimZ", ctypes.c_uint), ("blockDimX", ctypes.c_uint),
                ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.c_void_p), ("numAttrs", ctypes.c_uint)]


@functools.lru_cache(maxsize=None)
def _max_active_clusters():
    fn = ctypes.CDLL("libcuda.so.1").cuOccupancyMaxActiveClusters
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p,
                   ctypes.POINTER(_LaunchConfig)]
    return fn


def cluster_sms(function_ptr: int, cluster: int, threads: int, smem_bytes: int,
                sms: int) -> int:
    """SMs covered by the clusters of `cluster` blocks that can run at once of the kernel at
    `function_ptr` (a CUfunction compiled with ``__cluster_dims__(cluster, 1, 1)``; the current
    device's context), its blocks of `threads` threads asking `smem_bytes` of dynamic shared
    memory each: more than half an SM's, so that one block takes an SM (the kernel must allow
    that much, cudaFuncAttributeMaxDynamicSharedMemorySize). `sms`: the device's SM count, the
    grid the driver is asked about being `cluster` × `sms` blocks."""
    if cluster < 1 or threads < 1 or smem_bytes < 0 or sms < 1:
        raise ValueError(f"cluster_sms: cluster={cluster}, threads={threads}, "
                         f"smem_bytes={smem_bytes}, sms={sms}")
    config = _LaunchConfig(cluster * sms, 1, 1, threads, 1, 1, smem_bytes, None, None, 0)
    n = ctypes.c_int(0)
    err = _max_active_clusters()(ctypes.byref(n), ctypes.c_void_p(function_ptr),
                                 ctypes.byref(config))
    if err != 0:
        raise RuntimeError(f"cuOccupancyMaxActiveClusters failed (CUresult {err}) for clusters "
                           f"of {cluster} blocks of {threads} threads, {smem_bytes} bytes each")
    return n.value * cluster
