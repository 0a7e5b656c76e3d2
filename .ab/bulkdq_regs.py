"""Registers / spills / shared memory of the atomic-dQ warp-specialized dK/dV kernels (sm_90a),
fp16 and bf16, d = 64 and 128, unpacked and packed, dense/causal (no GPU; branch bulk-dq).
PYTHONPATH=REPO python .ab/bulkdq_regs.py"""
import dataclasses
from concurrent.futures import ProcessPoolExecutor
from cuflash.gpu import build, plan
from cuflash.gpu.plan import Variant
from cuflash.tile import TileConfig


def specs():
    out = []
    for dt in ("float16", "bfloat16"):
        for d in (64, 128):
            for v in (Variant(), Variant(mask="causal"), Variant(mask="causal", packed=True)
                      if "packed" in {f.name for f in dataclasses.fields(Variant)} else None):
                if v is None:
                    continue
                out += plan.specs_for(dt, d, TileConfig(64, 128, 12, 2, "wgmma"), v, True, False)
    return out


def one(s):
    try:
        r = build.compile_offline(build.source(s), s.name, s.arch or "sm_90", s.smem_bytes())
        return f"{s.name} smem={s.smem_bytes()} regs={r.registers} spills={r.spills}"
    except RuntimeError as e:
        return f"{s.name} ERROR {str(e)[:3000]}"


if __name__ == "__main__":
    todo = specs()
    print(len(todo), "kernels", flush=True)
    with ProcessPoolExecutor(2) as ex:
        for line in ex.map(one, todo):
            print(line, flush=True)
