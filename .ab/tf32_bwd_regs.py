"""Registers / spills of the TF32 backward kernels (flash_bwd_tf32.cu) of the defaults and the
experiments (no GPU).  PYTHONPATH=REPO python .ab/tf32_bwd_regs.py [filter] [--arch sm_80]"""
import sys
from concurrent.futures import ProcessPoolExecutor
from cuflash.gpu import build, precompile

ARCH = sys.argv[sys.argv.index("--arch") + 1] if "--arch" in sys.argv else "sm_90"

def specs():
    return [s for s in precompile.default_specs(ARCH)
            if s.role != "fwd" and s.family in ("tf32", "tf32x3")]

def one(s):
    try:
        r = build.compile_offline(build.source(s), s.name, s.arch or ARCH, s.smem_bytes())
        return f"{s.name} regs={r.registers} spills={r.spills} smem={s.smem_bytes()}"
    except RuntimeError as e:
        return f"{s.name} ERROR {str(e)[:3000]}"

if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--") and a != ARCH]
    todo = specs()
    if args:
        todo = [t for t in todo if args[0] in t.name]
    print(len(todo), "kernels", flush=True)
    with ProcessPoolExecutor(2) as ex:
        for line in ex.map(one, todo):
            print(line, flush=True)
