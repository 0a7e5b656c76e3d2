"""NVRTC sm_90 report (registers, spills, smem) of every x1 forward tile of wgmma_f16x3_tiles at
d = 64 and 128, dense / causal / window with the score modifiers (precompile's register-tight
variants): v61's new tiles must compile clean before a GPU sees them."""
import concurrent.futures as cf, sys
from cuflash.gpu import build, plan, precompile
from cuflash.tile import wgmma_f16x3_tiles

todo = []
for d in (64, 128):
    for t in wgmma_f16x3_tiles(d, False, "wgmma_f16x1"):
        (base,) = plan.specs_for("float32", d, t, plan.Variant("causal"), False)
        for v in precompile.register_tight_variants(base) or [base.variant]:
            (s,) = plan.specs_for("float32", d, t, v, False)
            plan.validate(s, plan.SMEM_LIMIT["sm_90"], "sm_90")
            todo.append((s, "sm_90", build.source(s)))
bad = 0
with cf.ProcessPoolExecutor(2) as pool:
    for spec, rep, err in pool.map(precompile._compile, todo):
        if err:
            print(spec.name, "FAILED", err[:300]); bad += 1; continue
        bad += bool(rep.spills)
        print(f"{spec.name:70} regs {rep.registers:>4} spill {rep.spills:>5} smem {spec.smem_bytes():>7}")
print(len(todo), "kernels,", bad, "failed or spilled")
