"""The GPU tools in tools/ (bench_*, ab_*, host_profile) on a machine without a GPU: one line and
exit 2 (fuzz, session 38: each printed a CUDA traceback), --help still their usage."""
import subprocess
import sys
from pathlib import Path

import pytest

from cuflash._xp import gpu_available

REPO = Path(__file__).resolve().parents[1]
TOOLS = ("ab_kernels", "ab_speed", "bench_decode", "bench_f32", "bench_f64", "bench_fwd_tiles",
         "bench_issue12", "bench_kvcache", "bench_layouts", "bench_order", "bench_variants",
         "host_profile")


def test_every_gpu_tool_goes_through_the_gate():
    for name in TOOLS:
        text = (REPO / "tools" / f"{name}.py").read_text()
        assert 'if __name__ == "__main__":\n    import gpu_tool' in text, name
        assert "sys.exit(gpu_tool.run(main))" in text, name


@pytest.mark.skipif(gpu_available(), reason="a GPU is visible: the tools would run")
@pytest.mark.parametrize("name", ["bench_f32", "ab_speed"])
def test_without_a_gpu_one_line_and_exit_2(name):
    proc = subprocess.run([sys.executable, f"tools/{name}.py"], capture_output=True, text=True,
                          cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"{name}.py: needs a CUDA GPU visible to CuPy, and there is " \
                                  f"none here"
    help_ = subprocess.run([sys.executable, f"tools/{name}.py", "--help"], capture_output=True,
                           text=True, cwd=REPO)
    assert help_.returncode == 0 and "usage:" in help_.stdout
