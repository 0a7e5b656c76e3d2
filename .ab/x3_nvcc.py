"""The x3 kernels (wgmma_f16x3 fwd/bwd, dense + causal + window/softcap/alibi) compiled by the local
nvcc (13.0, the device's NVRTC's version) for sm_90a: registers and spill bytes per kernel.
NVRTC 13.5 (cuflash compile) and the device's 13.0 disagree on spills (call 170)."""
import dataclasses, re, subprocess, sys, tempfile, os, concurrent.futures as cf
from cuflash.tile import wgmma_f16x3_tiles
from cuflash.gpu import build, plan, precompile

def one(item):
    name, src = item
    with tempfile.TemporaryDirectory() as d:
        cu = os.path.join(d, "k.cu"); open(cu, "w").write(src)
        opts = [o for o in build.options() if not o.startswith("--gpu-architecture") and not o.startswith("-arch")]
        inc = build.cuda_include_dir()
        r = subprocess.run(["nvcc", "-arch=sm_90a", "-cubin", "-o", os.path.join(d, "k.cubin"), "-Xptxas", "-v",
                            "-std=c++17", "-w", "-ftz=true"] + (["-I" + inc] if inc else []) + [cu],
                           capture_output=True, text=True)
        log = r.stdout + r.stderr
        if r.returncode:
            return name, "FAIL " + log[-400:]
        m = re.search(r"Function properties for " + re.escape(name) + r"\n.*?(\d+) bytes spill stores.*?Used (\d+) registers", log, re.S)
        return name, (f"regs {m.group(2)} spill {m.group(1)}" if m else log[-300:])

todo = {}
for d in (64, 128):
    for bwd in (False, True):
        for tile in wgmma_f16x3_tiles(d, bwd):
            for causal in (False, True):
                for s in plan.specs_for("float32", d, tile, causal, bwd):
                    vs = [s] + [dataclasses.replace(s, variant=v) for v in precompile.register_tight_variants(s)]
                    for v in vs:
                        if sys.argv[1:] and not re.search(sys.argv[1], v.name): continue
                        todo[v.name] = build.source(v)
with cf.ProcessPoolExecutor(2) as pool:
    for name, rep in pool.map(one, todo.items()):
        print(f"{name:75} {rep}", flush=True)
