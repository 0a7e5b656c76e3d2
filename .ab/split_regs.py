"""Registers / spills of the split-KV forward kernels of every family (no GPU).
   PYTHONPATH=REPO python .ab/split_regs.py"""
import sys
from concurrent.futures import ProcessPoolExecutor
from cuflash import TileConfig
from cuflash.gpu import build, precompile
from cuflash.gpu.plan import KernelSpec, Variant

def specs():
    out = []
    for arch in ("sm_80", "sm_90"):
        for s in precompile.default_specs(arch):
            if s.role == "fwd" and s.variant.split:
                out.append((s, arch))
    for dt, d, tile, arch in (("float32", 64, TileConfig(64, 64, 8, 1), "sm_80"),
                              ("float64", 64, TileConfig(64, 32, 4, 2, "dmma"), "sm_80"),
                              ("float64", 256, TileConfig(32, 32, 4, 1), "sm_80"),
                              ("float16", 128, TileConfig(128, 128, 8, 3, "wgmma"), "sm_90"),
                              ("float32", 64, TileConfig(32, 64, 4, 2, "tf32"), "sm_80"),
                              ("float16", 128, TileConfig(16, 64, 4, 2, "mma"), "sm_80")):
        out.append((KernelSpec("fwd", dt, d, tile, Variant(mask="causal", split=True)), arch))
    for dt in ("float16", "bfloat16"):
        for tile in (TileConfig(16, 64, 4, 2, "mma"), TileConfig(16, 64, 4, 3, "mma")):
            for cache in ("cache", "paged"):
                out.append((KernelSpec("fwd", dt, 128, tile, Variant(mask="causal", split=True, cache=cache)), "sm_90"))
    return out

def one(a):
    s, arch = a
    try:
        r = build.compile_offline(build.source(s), s.name, s.arch or arch, s.smem_bytes())
        return f"{arch} {s.name} regs={r.registers} spills={r.spills}"
    except RuntimeError as e:
        return f"{arch} {s.name} ERROR {str(e)[:3000]}"

if __name__ == "__main__":
    todo = specs()
    if len(sys.argv) > 1:
        todo = [t for t in todo if sys.argv[1] in t[0].name]
    print(len(todo), "kernels", flush=True)
    with ProcessPoolExecutor(2) as ex:
        for line in ex.map(one, todo):
            print(line, flush=True)
