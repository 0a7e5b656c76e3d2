"""The GPU facts cuflash plans with, in one place: architecture, shared memory per block and per
SM, L2 size and SM count. ``current()`` asks the driver once per device (through CuPy) and keeps
the answer; ``assumed(arch)`` is what cuflash takes for a GPU it cannot ask (planning and the
compile command without a GPU, experiment files checked on a CPU, the IO model's defaults);
``visible()`` is the current GPU when there is one, else the assumed default (sm_90: an H100 or
H200, the GPU the default tiles were measured on).
"""
from __future__ import annotations

import dataclasses
import functools

#: Shared memory the system reserves per resident block on sm_80 and later (bytes; CUDA
#: Programming Guide, "Shared Memory"), on top of what the kernel asks for.
SMEM_RESERVED_PER_BLOCK = 1024

#: The architecture the defaults assume without a GPU.
DEFAULT_ARCH = "sm_90"


@dataclasses.dataclass(frozen=True)
class Device:
    """One GPU as cuflash sees it."""

    arch: str              # 'sm_XY' of the compute capability
    smem_per_block: int    # opt-in dynamic shared memory per block, bytes
    smem_per_sm: int       # shared memory of one SM, bytes (what its resident blocks share)
    l2_bytes: int          # L2 cache, bytes
    sm_count: int
    name: str = ""

    @property
    def hopper(self) -> bool:
        """sm_90: the wgmma kernels run here."""
        return is_hopper(self.arch)

    def blocks_per_sm(self, smem_bytes: int) -> int:
        """How many blocks of ``smem_bytes`` dynamic shared memory fit one SM (shared memory only)."""
        return self.smem_per_sm // (smem_bytes + SMEM_RESERVED_PER_BLOCK)


def is_hopper(arch: str) -> bool:
    return arch in ("sm_90", "sm_90a")


#: What cuflash assumes for a GPU it cannot ask, by architecture: the opt-in shared memory per
#: block and per SM of each compute capability (CUDA Programming Guide, "Technical
#: Specifications"), with the L2 and SM count of its data-center part (A100 for sm_80, H100/H200
#: SXM for sm_90; sm_86/sm_89: an RTX A6000 and an L40S).
ASSUMED = {
    "sm_80": Device("sm_80", 166912, 167936, 40 * 2**20, 108, "A100 (assumed)"),
    "sm_86": Device("sm_86", 101376, 102400, 6 * 2**20, 84, "RTX A6000 (assumed)"),
    "sm_89": Device("sm_89", 101376, 102400, 96 * 2**20, 142, "L40S (assumed)"),
    "sm_90": Device("sm_90", 232448, 233472, 50 * 10**6, 132, "H100/H200 SXM (assumed)"),
}
ASSUMED["sm_90a"] = dataclasses.replace(ASSUMED["sm_90"], arch="sm_90a")


def assumed(arch: str = DEFAULT_ARCH) -> Device:
    """The Device cuflash assumes for ``arch`` (KeyError names the known ones)."""
    try:
        return ASSUMED[arch]
    except KeyError:
        raise KeyError(f"no assumed device for arch {arch!r}; known: {sorted(ASSUMED)}") from None


def current(device_id: int | None = None) -> Device:
    """The GPU ``device_id`` (default: CuPy's current device), asked once and kept."""
    import cupy
    return _query(cupy.cuda.Device().id if device_id is None else int(device_id))


@functools.lru_cache(maxsize=None)
def _query(device_id: int) -> Device:
    # Device.attributes asks the driver for every attribute: once per device, not per call
    import cupy
    dev = cupy.cuda.Device(device_id)
    attrs = dev.attributes
    name = cupy.cuda.runtime.getDeviceProperties(device_id)["name"]
    return Device(arch=f"sm_{dev.compute_capability}",
                  smem_per_block=int(attrs["MaxSharedMemoryPerBlockOptin"]),
                  smem_per_sm=int(attrs["MaxSharedMemoryPerMultiprocessor"]),
                  l2_bytes=int(attrs["L2CacheSize"]),
                  sm_count=int(attrs["MultiProcessorCount"]),
                  name=name.decode() if isinstance(name, bytes) else str(name))


def visible() -> Device:
    """The current GPU, or the assumed default device when no GPU is visible to CuPy."""
    from ._xp import gpu_available
    if gpu_available():
        try:
            return current()
        except Exception:   # a driver that answers the probe but not the attributes
            pass
    return assumed()
