"""Registers / spills of the warp-specialized forward kernels (sm_90a) of the defaults and the
variants (no GPU).  PYTHONPATH=REPO python .ab/ws_regs.py [filter]"""
import sys
from concurrent.futures import ProcessPoolExecutor
from cuflash.gpu import build, precompile

def specs():
    return [s for s in precompile.default_specs("sm_90") if s.role == "fwd" and s.warp_specialized]

def one(s):
    try:
        r = build.compile_offline(build.source(s), s.name, s.arch or "sm_90", s.smem_bytes())
        return f"{s.name} regs={r.registers} spills={r.spills}"
    except RuntimeError as e:
        return f"{s.name} ERROR {str(e)[:3000]}"

if __name__ == "__main__":
    todo = specs()
    if len(sys.argv) > 1:
        todo = [t for t in todo if sys.argv[1] in t.name]
    print(len(todo), "kernels", flush=True)
    with ProcessPoolExecutor(2) as ex:
        for line in ex.map(one, todo):
            print(line, flush=True)
