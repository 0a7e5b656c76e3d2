"""What a zero grid dimension does to a CUDA context through CuPy (issue: a zero-size batch on
the GPU once ended in CUDA_ERROR_ILLEGAL_ADDRESS and a dead context). Each probe runs in its own
process and prints what happened and whether a real kernel still runs afterwards:

  raw       a trivial RawKernel launched with grid (1, 0): CuPy's Function.__call__ clamps
            every grid dimension to at least 1 (cupy/cuda/function.pyx, max(1, grid[i])), so the
            kernel runs once instead of not at all
  old_path  cuflash.attention on q (0, 3, 17, 16), k, v (1, 3, 20, 16) with ops._launch as it
            was at 0dd094b (no guard: grid (grid_x, B) even for B = 0)
  fixed     the same call on the current code

    python3 tests/empty_grid_probe.py
"""
import subprocess
import sys

PROBES = {
    "raw": """
import cupy as cp
k = cp.RawKernel(r'extern "C" __global__ void f(float* x) { x[blockIdx.y] = 1.f; }', 'f')
x = cp.zeros(4, cp.float32)
try:
    k((1, 0), (32,), (x,)); cp.cuda.Device().synchronize()
    print("launch: no error; the kernel", "RAN (x[0] written)" if float(x[0]) == 1 else "did not run")
except Exception as e:
    print("launch:", type(e).__name__, e)
""",
    "old_path": """
import numpy as np, cupy as cp, cuflash
from cuflash.gpu import ops
def old_launch(spec, grid_x, B, args_of):   # ops._launch at 0dd094b
    kern, smem, _ = ops._ready(spec, cp.cuda.Device().id)
    if B <= ops._MAX_GRID_Y:
        kern((grid_x, B), (spec.threads(),), args_of(ops._whole) + (np.int32(smem),), shared_mem=smem)
        return
    raise AssertionError
ops._launch = old_launch
q = cp.asarray(np.random.default_rng(0).standard_normal((0, 3, 17, 16)), dtype=cp.float32)
k = v = cp.asarray(np.random.default_rng(1).standard_normal((1, 3, 20, 16)), dtype=cp.float32)
try:
    out = cuflash.attention(q, k, v, causal=True); cp.cuda.Device().synchronize()
    print("empty call: no error, out", out.shape)
except Exception as e:
    print("empty call:", type(e).__name__, e)
""",
    "fixed": """
import numpy as np, cupy as cp, cuflash
q = cp.asarray(np.random.default_rng(0).standard_normal((0, 3, 17, 16)), dtype=cp.float32)
k = v = cp.asarray(np.random.default_rng(1).standard_normal((1, 3, 20, 16)), dtype=cp.float32)
out, lse = cuflash.attention(q, k, v, causal=True, return_lse=True)
g = cuflash.attention_backward(cp.ones_like(out), q, k, v, out, lse, causal=True)
cp.cuda.Device().synchronize()
print("empty call: out", out.shape, "grads", [x.shape for x in g])
""",
}

AFTER = """
try:
    y = cp.arange(10, dtype=cp.float32) * 2; cp.cuda.Device().synchronize()
    print("context after:", "alive" if float(y.sum()) == 90.0 else "wrong result")
except Exception as e:
    print("context after:", type(e).__name__, e)
"""

if __name__ == "__main__":
    for name, code in PROBES.items():
        r = subprocess.run([sys.executable, "-c", code + AFTER], capture_output=True, text=True,
                           timeout=300)
        lines = (r.stdout + r.stderr).strip().splitlines()
        print(f"[{name}] rc={r.returncode}")
        for line in lines[-6:]:
            print("   ", line[:300])
