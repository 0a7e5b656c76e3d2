"""Compile the warp-specialized dK/dV kernel with atomic dQ (deterministic=False) for sm_90a:
d 64/128, fp16/bf16, dense/causal and the register-tight variants; print regs/spills/smem."""
import dataclasses, sys, concurrent.futures as cf
from cuflash.tile import TileConfig
from cuflash.gpu import build, plan, precompile

stages = [int(s) for s in (sys.argv[1:] or ["2"])]
todo = []
for st in stages:
    tile = TileConfig(64, 128, 12, st, "wgmma")
    for dt in ("float16", "bfloat16"):
        for d in (64, 128):
            for causal in (False, True):
                for s in plan.specs_for(dt, d, tile, causal, True, False):
                    if s.role != "bwd_dkdv":
                        continue
                    vs = [s] + [dataclasses.replace(s, variant=v)
                                for v in precompile.register_tight_variants(s)]
                    todo += [(v, "sm_90a", build.source(v)) for v in vs]
todo = list({t[0].name: t for t in todo}.values())
with cf.ProcessPoolExecutor(2) as pool:
    for spec, rep, err in pool.map(precompile._compile, todo):
        print(f"{spec.name:70} " + (err[:300] if err else
              f"{rep.registers:4} spill {rep.spills:4} smem {spec.smem_bytes()}"), flush=True)
