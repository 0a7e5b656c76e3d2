"""Array-module helpers: which of NumPy or CuPy an array belongs to, and the dtypes we accept.

CuPy is optional. Nothing here imports it eagerly in a way that fails: with no CuPy installed,
or CuPy installed on a machine without a GPU, the CPU path works unchanged.
"""
from __future__ import annotations

import functools

import numpy as np

try:  # bfloat16 for NumPy/CuPy arrays comes from ml_dtypes.
    import ml_dtypes

    bfloat16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - exercised only without ml_dtypes
    bfloat16 = None

#: dtypes attention accepts, by name.
DTYPES = {"float16": np.dtype(np.float16), "float32": np.dtype(np.float32),
          "float64": np.dtype(np.float64)}
if bfloat16 is not None:
    DTYPES["bfloat16"] = bfloat16
#: Every dtype name cuflash knows, whether or not this install can make arrays of it.
DTYPE_NAMES = ("float16", "bfloat16", "float32", "float64")
#: What to say when bfloat16 is asked for without ml_dtypes.
BFLOAT16_HINT = ("bfloat16 needs the ml_dtypes package, which is not installed: "
                 "pip install ml_dtypes (or pip install -e '.[test]')")


def dtype_name(dtype) -> str:
    """'float16', 'bfloat16', 'float32' or 'float64' (or NumPy's own name for anything else)."""
    dt = np.dtype(dtype)
    return "bfloat16" if bfloat16 is not None and dt == bfloat16 else dt.name


def resolve_dtype(name_or_dtype) -> np.dtype:
    """The NumPy dtype for a name such as 'bfloat16', raising ValueError on an unknown name."""
    if isinstance(name_or_dtype, str):
        if name_or_dtype == "bfloat16" and bfloat16 is None:
            raise ValueError(BFLOAT16_HINT)
        if name_or_dtype not in DTYPES:
            raise ValueError(f"unknown dtype {name_or_dtype!r}; valid: {sorted(DTYPES)}")
        return DTYPES[name_or_dtype]
    return np.dtype(name_or_dtype)


def accum_dtype(dtype) -> np.dtype:
    """float64 for float64 inputs, float32 for everything else (float16/bfloat16/float32)."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


@functools.lru_cache(maxsize=None)
def cupy_module():
    """The cupy module, or None when CuPy is not importable."""
    try:
        import cupy
    except Exception:  # ImportError, or a broken CUDA install raising at import
        return None
    return cupy


def is_cupy_array(x) -> bool:
    cp = cupy_module()
    return cp is not None and isinstance(x, cp.ndarray)


def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    cp = cupy_module()
    if cp is None:
        return False
    try:
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def _check_numpy_array(name, a) -> None:
    """A NumPy input must be a plain array in native byte order: masks (numpy.ma) would be
    ignored, numpy.matrix's ``*`` and 2-D shape break the kernels' algebra, and the GPU copy of a
    byte-swapped array would be garbage. TypeError naming the argument otherwise."""
    if type(a) is not np.ndarray:
        if isinstance(a, np.ma.MaskedArray):
            raise TypeError(f"{name} is a numpy.ma.MaskedArray; attention does not apply masks: "
                            f"pass {name}.filled(value) or use causal=True for a causal mask")
        if isinstance(a, np.matrix):
            raise TypeError(f"{name} is a numpy.matrix; pass np.asarray({name}) (shape "
                            f"(..., seq_len, head_dim))")
    if not a.dtype.isnative:
        raise TypeError(f"{name} has non-native byte order (dtype {a.dtype.str!r}); convert it "
                        f"with {name}.astype({name}.dtype.newbyteorder('='))")


def array_module(**arrays):
    """numpy or cupy, from keyword-named arrays; TypeError naming them when they mix, are not
    arrays, or are NumPy arrays of a kind attention cannot take (``_check_numpy_array``)."""
    kinds = {}
    for name, a in arrays.items():
        if is_cupy_array(a):
            kinds[name] = "cupy"
        elif isinstance(a, np.ndarray):
            _check_numpy_array(name, a)
            kinds[name] = "numpy"
        else:
            raise TypeError(f"{name} must be a numpy.ndarray or cupy.ndarray, got {type(a).__name__}")
    if len(set(kinds.values())) > 1:
        desc = ", ".join(f"{n}: {k}" for n, k in kinds.items())
        raise TypeError(f"inputs mix NumPy and CuPy arrays ({desc}); move them to one device first")
    return cupy_module() if "cupy" in kinds.values() else np


def to_numpy(x) -> np.ndarray:
    """A NumPy copy (or view) of a NumPy or CuPy array."""
    return x.get() if is_cupy_array(x) else np.asarray(x)
