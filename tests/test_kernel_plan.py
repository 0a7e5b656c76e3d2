"""CPU checks of the kernel plan for the Hopper (wgmma) forward: generated wrappers in sync with
their generator, the tile rules and refusals, the default choice per architecture, and an NVRTC
compile for sm_90a with no register spills (no GPU needed)."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from cuflash import TileConfig, default_tile
from cuflash.gpu import build, plan

KERNELS = Path(__file__).resolve().parents[1] / "kernels_cu"
HOPPER = plan.SMEM_LIMIT["sm_90"]
WG = TileConfig(128, 128, 8, 3, "wgmma")


def test_wgmma_header_is_what_the_generator_writes():
    spec = importlib.util.spec_from_file_location("gen_wgmma", KERNELS / "gen_wgmma.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (KERNELS / "wgmma.cuh").read_text() == gen.render(), \
        "kernels_cu/wgmma.cuh is stale: run python kernels_cu/gen_wgmma.py"


def test_wgmma_spec_layout():
    (spec,) = plan.specs_for("float16", 72, WG, variant=False, backward=False)
    assert spec.head_dim == 128          # padded to whole 64-element panels
    assert spec.arch == "sm_90a"
    assert spec.smem_bytes() == (128 + 3 * 2 * 128) * 128 * 2 + 1024
    assert spec.name == "cuflash_wgmma_fwd_f16_d128_m128_n128_w8_s3"
    plan.validate(spec, HOPPER, "sm_90")


@pytest.mark.parametrize("tile,arch,match", [
    (WG, "sm_80", "runs only on sm_90"),
    (WG, "sm_100", "runs only on sm_90"),
    (TileConfig(64, 128, 8, 3, "wgmma"), "sm_90", "64 rows per warpgroup"),
    (TileConfig(128, 128, 8, 2, "wgmma"), "sm_90", "3 or 4 stages"),
])
def test_wgmma_refusals(tile, arch, match):
    with pytest.raises(ValueError, match=match):
        plan.check_tile(tile, 64, "bfloat16", smem_limit=HOPPER, arch=arch)


def test_wgmma_backward_is_deterministic_only_and_16_bit():
    with pytest.raises(ValueError, match="dQ in its own pass"):
        plan.specs_for("float16", 64, WG, variant=True, backward=True, deterministic=False)
    dkdv, dq = plan.specs_for("float16", 64, TileConfig(64, 128, 8, 2, "wgmma"), variant=True,
                              backward=True)
    assert (dkdv.role, dkdv.tile.num_warps, dq.role, dq.tile.num_warps) == ("bwd_dkdv", 8,
                                                                           "bwd_dq", 4)
    assert dkdv.smem_bytes() == (2 * 128 + 2 * 2 * 64) * 64 * 2 + 2 * 2 * 64 * 4 + 1024
    assert dq.smem_bytes() == (2 * 64 + 2 * 2 * 128) * 64 * 2 + 1024
    with pytest.raises(ValueError, match="64 keys per warpgroup"):
        plan.check_tile(TileConfig(64, 64, 8, 2, "wgmma"), 64, "float16", backward=True,
                        smem_limit=HOPPER, arch="sm_90")
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        plan.specs_for("float32", 64, WG, variant=False, backward=False)


def test_wgmma_tile_that_does_not_fit_is_refused():
    big = TileConfig(128, 256, 8, 3, "wgmma")   # (128 + 6·256)·256·2 bytes at d = 256
    with pytest.raises(ValueError, match=r"needs \d+ bytes of shared memory"):
        plan.check_tile(big, 256, "float16", smem_limit=HOPPER, arch="sm_90")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
def test_default_tiles_per_architecture(dtype, causal):
    fwd90 = default_tile(128, dtype, causal=causal, smem_limit=HOPPER, arch="sm_90")
    assert fwd90.kernel == "wgmma"
    bwd90 = default_tile(128, dtype, backward=True, causal=causal, smem_limit=HOPPER, arch="sm_90")
    assert bwd90.kernel == "wgmma"
    atomic = default_tile(128, dtype, backward=True, causal=causal, deterministic=False,
                          smem_limit=HOPPER, arch="sm_90")
    assert atomic.kernel == "mma"
    for arch in ("sm_80", "sm_89", "sm_100"):
        limit = plan.SMEM_LIMIT.get(arch, HOPPER)
        assert default_tile(128, dtype, causal=causal, smem_limit=limit, arch=arch).kernel == "mma"
    # no device (the CPU twin): never a Hopper-only tile
    assert default_tile(128, dtype, causal=causal).kernel == "mma"
    assert default_tile(128, np.float32, smem_limit=HOPPER, arch="sm_90").kernel == "simt"


def test_wgmma_compiles_for_sm90a_without_spills():
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    if build.cuda_include_dir() is None:
        pytest.skip("CUDA headers not found")
    specs = []
    for causal in (False, True):
        specs += plan.specs_for("bfloat16", 128, WG, variant=causal, backward=False)
        specs += plan.specs_for("float16", 128, default_tile(128, "float16", backward=True,
                                causal=causal, smem_limit=HOPPER, arch="sm_90"), causal, True)
    for spec in specs:
        rep = build.compile_offline(build.source(spec), spec.name, spec.arch, spec.smem_bytes())
        assert rep.registers is not None and rep.registers <= 255
        assert rep.spills == 0, f"{spec.name} spills {rep.spills} bytes"


def test_kernel_getters_are_cached():
    """Every launch asks build for its kernel: the getters must return the compiled function
    from a cache, not rebuild the source (reading kernels_cu/ costs ~0.6 ms per call: a
    backward lost that much per call when a decorator slid off get_preprocess)."""
    from cuflash.gpu import build
    for name in ("get_kernel", "get_tile_lists", "get_preprocess", "get_combine", "_module"):
        assert hasattr(getattr(build, name), "cache_info"), f"build.{name} is not cached"
