"""What a measurement raises when its method cannot run here, and the one rule for a point's
array module (NumPy on the CPU, CuPy on the GPU or :class:`Unavailable`). Its own module so that
measure.py, decode.py and ring.py share it without importing each other."""
from __future__ import annotations

import numpy as np

from .._xp import cupy_module


class Unavailable(Exception):
    """The method cannot run here (no torch, no GPU, a backend refusing the shape or dtype)."""


def point_module(point):
    """NumPy for a point on the CPU, CuPy for one on the GPU; Unavailable where CuPy is not
    importable."""
    if point.device != "gpu":
        return np
    cp = cupy_module()
    if cp is None:
        raise Unavailable("CuPy is not importable, so nothing runs on the GPU")
    return cp
