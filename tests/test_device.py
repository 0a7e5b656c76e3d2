"""cuflash.device: the one description of the GPU that planning, the kernels' launch, the IO model
and the experiment checks read."""
import pytest

from cuflash import device, iomodel
from cuflash.experiments import schema
from cuflash.gpu import plan


def test_assumed_devices():
    h = device.assumed()
    assert h.arch == device.DEFAULT_ARCH == "sm_90" and h.hopper
    assert (h.smem_per_block, h.smem_per_sm, h.sm_count) == (232448, 233472, 132)
    assert device.assumed("sm_90a").smem_per_block == h.smem_per_block
    assert not device.assumed("sm_80").hopper
    with pytest.raises(KeyError, match="sm_70.*known"):
        device.assumed("sm_70")


def test_blocks_per_sm_counts_the_reserved_kilobyte():
    h = device.assumed()
    half = h.smem_per_sm // 2 - device.SMEM_RESERVED_PER_BLOCK
    assert h.blocks_per_sm(half) == 2
    assert h.blocks_per_sm(half + 1) == 1
    assert h.blocks_per_sm(h.smem_per_block) == 1


def test_everyone_reads_the_same_facts():
    h = device.assumed()
    assert plan.SMEM_LIMIT["sm_90"] == schema.DEFAULT_SMEM_LIMIT == h.smem_per_block
    assert plan.SMEM_LIMIT["sm_80"] == device.assumed("sm_80").smem_per_block
    assert iomodel.L2_BYTES == h.l2_bytes
    assert iomodel.RESIDENT_BLOCKS == 2 * h.sm_count
    assert schema.DEFAULT_ARCH == h.arch


def test_visible_without_gpu_is_the_assumed_default(monkeypatch):
    import cuflash._xp as xp
    monkeypatch.setattr(xp, "gpu_available", lambda: False)
    assert device.visible() == device.assumed()
    assert schema.device_arch() == "sm_90"
    assert schema.device_smem_limit() == 232448


@pytest.mark.gpu
def test_current_asks_the_driver_once():
    import cupy
    dev = cupy.cuda.Device()
    d = device.current()
    assert d.arch == f"sm_{dev.compute_capability}"
    assert d.smem_per_block == dev.attributes["MaxSharedMemoryPerBlockOptin"]
    assert d.sm_count == dev.attributes["MultiProcessorCount"] > 0
    assert d.l2_bytes == dev.attributes["L2CacheSize"] > 0
    assert device.current() is d   # kept, not asked again
    assert device.visible() is d
