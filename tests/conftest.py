"""Shared test setup: the `xp` fixture runs each test on NumPy (the CPU twin) and on CuPy (the
CUDA kernels); CuPy cases, and every test marked `gpu`, are skipped cleanly without a GPU."""
import os
import sys

import numpy as np
import pytest

from cuflash._xp import cupy_module, gpu_available

sys.path.insert(0, os.path.dirname(__file__))  # `import helpers` from any rootdir

NO_GPU = "no CUDA GPU visible to CuPy (or CuPy not importable)"


def pytest_configure(config):
    config.addinivalue_line("markers",
                            "gpu: needs a CUDA GPU through CuPy (skipped cleanly without one)")
    config.addinivalue_line("markers", "slow: takes more than a few seconds")
    _share_blas_threads()


def _share_blas_threads():
    """Under pytest-xdist, each worker's BLAS (the float64 oracle's matmuls) gets its share of
    the cores instead of all of them: 12 workers each starting 16 OpenBLAS threads on a
    16-core machine spend their time contending."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers <= 1:
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(max(1, (os.cpu_count() or 1) // workers), user_api="blas")


#: GPU tests of the full tier only (`-m gpu`): sweeps over many tiles and shapes, each a fresh
#: kernel specialization to compile (0.5-1.2 s each on a fresh machine). The fast tier,
#: `-m "gpu and not slow"` (about a minute on the H200, compiles included), still reaches every
#: launch path: every kernel family, role and dQ mode (test_empty.py, with a real call after each
#: zero-size one), the default kernels of every dtype against the oracle (test_forward.py,
#: test_api.py, test_gpu_kernels.py), refusals, the grid limit, streams and memory.
SLOW_GPU_TESTS = ("test_tiles_against_oracle", "test_backward_matches_oracle",
                  "test_backward_tiles", "test_forward_tiles",
                  # the reference paths of KV caches, GQA, varlen and head dims (each case a
                  # few kernel specializations or a loop of launches)
                  "test_matches_oracle", "test_larger_head_dims_and_pages", "test_gqa_strategies",
                  "test_varlen_variants", "test_varlen_matches_oracle", "test_head_dims",
                  "test_head_dim_v_differs", "test_gqa_matches_oracle", "test_gqa_variants",
                  "test_head_dim_v_with_gqa_and_variants")
#: GPU tests of the full tier only, every case: long single tests of features whose kernels the
#: fast tier already runs (a mask_mod evaluated four ways, 19 s; ring attention simulated on one
#: GPU, 7-11 s per dtype; H200, 2026-12-01).
FULL_TIER_ONLY = ("test_kernel_and_cupy_evaluate_agree_on_gpu", "test_simulated_ring_on_one_gpu")
#: test_variants.py's kernel cases in the fast tier, at one shape: per kernel family and dtype
#: the variant that combines a window, softcap and ALiBi; a mask_mod (its tile-list kernel) on
#: one family. (At 486 tests, with a mask_mod on every family, the tier took 64 s with -n 8 on
#: a fresh H200, 2026-12-01.)
FAST_VARIANTS = {"cap_alibi_window": None, "doc_causal": "mma-float16"}


def _slow_gpu(item, seen: set) -> bool:
    """Whether a GPU test belongs to the full tier only. Of each SLOW_GPU_TESTS function, the
    first GPU case collected stays in the fast tier, so that tier still reaches its path."""
    if "gpu" not in item.keywords:
        return False
    if item.originalname == "test_kernel_variants":
        params = item.callspec.params
        if params["name"] not in FAST_VARIANTS or params["T"] != 97:
            return True
        only = FAST_VARIANTS[params["name"]]
        return only is not None and not item.callspec.id.startswith(only)
    if item.originalname in FULL_TIER_ONLY:
        return True
    if item.originalname not in SLOW_GPU_TESTS:
        return False
    key = (item.fspath, item.originalname)
    if key in seen:
        return True
    seen.add(key)
    return False


def pytest_collection_modifyitems(config, items):
    slow, seen = pytest.mark.slow, set()
    for item in items:
        if _slow_gpu(item, seen):
            item.add_marker(slow)
    if gpu_available():
        return
    skip = pytest.mark.skip(reason=NO_GPU)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=[pytest.param("numpy", id="numpy"),
                        pytest.param("cupy", id="cupy", marks=pytest.mark.gpu)])
def xp(request):
    """The array module a test runs on: numpy (CPU twin) or cupy (CUDA kernels)."""
    if request.param == "numpy":
        return np
    if not gpu_available():
        pytest.skip(NO_GPU)
    return cupy_module()


@pytest.fixture
def cp():
    """CuPy, for gpu-marked tests (which are skipped before this runs when there is no GPU)."""
    return cupy_module()
