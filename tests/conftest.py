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


def pytest_collection_modifyitems(config, items):
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
