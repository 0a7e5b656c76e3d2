"""cuflash imports and runs on the CPU with CuPy absent, with CuPy present but no GPU visible,
and without ml_dtypes (no bfloat16); each case runs in a fresh interpreter."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

RUN_CPU_ATTENTION = """
import numpy as np
import cuflash
from cuflash._xp import gpu_available, cupy_module, DTYPES
from cuflash.oracle import oracle_attention, oracle_backward, rel_error
rng = np.random.default_rng(0)
q, k, v, do = (rng.standard_normal((2, 33, 16)).astype(np.float32) for _ in range(4))
out, vjp = cuflash.attention_vjp(q, k, v, causal=True)
dq, dk, dv = vjp(do)
ref = oracle_attention(q, k, v, causal=True)[0]
grads = oracle_backward(do, q, k, v, causal=True)
try:
    cuflash.attention(q.tolist(), k, v)
    list_error = None
except TypeError as exc:
    list_error = str(exc)
print(json.dumps({
    "gpu_available": gpu_available(),
    "cupy_importable": cupy_module() is not None,
    "out_err": rel_error(out, ref),
    "grad_err": max(rel_error(g, r) for g, r in zip((dq, dk, dv), grads)),
    "out_type": type(out).__name__,
    "dtypes": sorted(DTYPES),
    "list_error": list_error,
}))
"""


def _run(prelude, env=None):
    code = "import json, sys\n" + textwrap.dedent(prelude) + RUN_CPU_ATTENTION
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check_cpu_result(res):
    assert res["out_type"] == "ndarray"
    assert res["out_err"] < 1e-5 and res["grad_err"] < 1e-5, res
    assert "q must be a numpy.ndarray or cupy.ndarray, got list" in res["list_error"]


def test_works_without_cupy():
    res = _run("sys.modules['cupy'] = None  # makes `import cupy` raise ImportError")
    _check_cpu_result(res)
    assert res["cupy_importable"] is False and res["gpu_available"] is False


def test_works_with_cupy_but_no_visible_gpu():
    pytest.importorskip("cupy")
    res = _run("", env={"CUDA_VISIBLE_DEVICES": ""})
    _check_cpu_result(res)
    assert res["cupy_importable"] is True and res["gpu_available"] is False


def test_works_as_installed_here():
    """Plain import on this machine; gpu_available agrees with this process's view."""
    from cuflash._xp import gpu_available
    res = _run("")
    _check_cpu_result(res)
    assert res["gpu_available"] is gpu_available()


def test_works_without_ml_dtypes():
    res = _run("sys.modules['ml_dtypes'] = None")
    _check_cpu_result(res)
    assert res["dtypes"] == ["float16", "float32", "float64"]
