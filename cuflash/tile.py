"""Tile sizes: the one place that says how attention is cut into blocks, and the defaults.

The CPU twin reads block_m and block_n; the CUDA kernels read every field. Kernel-specific
limits (shared memory, warp layout) are checked in ``cuflash.gpu.plan`` where the device is known.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ._xp import dtype_name

KERNELS = ("simt", "mma")


def _is_pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


@dataclasses.dataclass(frozen=True)
class TileConfig:
    """How one attention pass is tiled.

    The forward keeps a ``block_m × d`` tile of Q resident and streams ``block_n × d`` tiles of K
    and V past it; the backward keeps a ``block_n × d`` tile of K and V resident and streams
    ``block_m × d`` tiles of Q, dO (and lse, D) past it. Names match the kernels and the CPU twin.
    """

    block_m: int = 64
    """Query rows per tile (rows of Q, O, lse held by one thread block). Power of two, 16..256."""

    block_n: int = 64
    """Key rows per tile (rows of K and V streamed per step). Power of two, 16..256."""

    num_warps: int = 4
    """Warps per thread block (32 threads each): 1, 2, 4, 8 or 16."""

    num_stages: int = 2
    """Shared-memory buffers for the streamed tiles (1 = load then compute; 2 = double buffering
    with cp.async, loading tile j+1 while computing tile j). 1..4."""

    kernel: str = "simt"
    """Kernel family: 'simt' (CUDA cores, every dtype and head_dim) or 'mma' (tensor cores,
    float16/bfloat16, head_dim a multiple of 16)."""

    def __post_init__(self):
        for name in ("block_m", "block_n"):
            val = getattr(self, name)
            if not isinstance(val, (int, np.integer)) or isinstance(val, bool) or not _is_pow2(val) \
                    or not 16 <= val <= 256:
                raise ValueError(f"TileConfig.{name}={val!r} must be a power of two in 16..256")
        if self.num_warps not in (1, 2, 4, 8, 16) or isinstance(self.num_warps, bool):
            raise ValueError(f"TileConfig.num_warps={self.num_warps!r} must be one of 1, 2, 4, 8, 16")
        if self.num_stages not in (1, 2, 3, 4) or isinstance(self.num_stages, bool):
            raise ValueError(f"TileConfig.num_stages={self.num_stages!r} must be one of 1, 2, 3, 4")
        if self.kernel not in KERNELS:
            raise ValueError(f"TileConfig.kernel={self.kernel!r} must be one of {KERNELS}")

    @property
    def num_threads(self) -> int:
        return 32 * self.num_warps

    def replace(self, **changes) -> "TileConfig":
        return dataclasses.replace(self, **changes)

    def short(self) -> str:
        """A compact label, e.g. 'mma_m128_n64_w4_s2'."""
        return (f"{self.kernel}_m{self.block_m}_n{self.block_n}"
                f"_w{self.num_warps}_s{self.num_stages}")


def mma_capable(head_dim: int, dtype) -> bool:
    """Whether the tensor-core kernels cover this head_dim and dtype."""
    return dtype_name(dtype) in ("float16", "bfloat16") and head_dim % 16 == 0


def default_tile(head_dim: int, dtype, *, backward: bool = False) -> TileConfig:
    """The tile the library uses when ``tile=None``, per (head_dim, dtype, pass).

    Each choice and its reason sits beside it; measurements behind the tensor-core choices are in
    NOTES.md. The CPU twin reads only block_m and block_n, so the same default serves it.
    """
    name = dtype_name(dtype)
    if mma_capable(head_dim, dtype):
        if not backward:
            # Forward, tensor cores: 4 warps × 16 query rows each = 64 rows; d <= 128 affords
            # 2 m-tiles per warp (128 rows) so each K/V fragment read from shared memory feeds two
            # mma's, halving shared-memory traffic per FLOP (FlashAttention-2 uses 128×64 at d=128).
            if head_dim <= 64:
                return TileConfig(128, 128, 4, 2, "mma")
            if head_dim <= 128:
                return TileConfig(128, 64, 4, 2, "mma")
            return TileConfig(64, 64, 4, 2, "mma")
        # Backward, tensor cores: one warp per 16 keys of the resident K/V tile; 64 keys × 64
        # queries keeps dK and dV accumulators plus S^T and dP^T within 255 registers at d <= 128.
        if head_dim <= 128:
            return TileConfig(64, 64, 4, 2, "mma")
        return TileConfig(32, 64, 4, 2, "mma")
    # CUDA-core (SIMT) path: every dtype and head_dim. Tiles hold float (double for float64)
    # copies in shared memory, so large head dims and float64 take smaller tiles to fit 227 KB.
    wide = name == "float64" or head_dim > 128
    if not backward:
        return TileConfig(32 if wide else 64, 64, 4 if wide else 8, 1, "simt")
    return TileConfig(32, 32 if wide else 64, 4, 1, "simt")
