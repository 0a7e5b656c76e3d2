"""SASS hashes of the backward dK/dV kernels a dQ-by-atomics refactor touches: the
warp-specialized wgmma kernel in both dQ modes (s2; dense, causal, softcap+ALiBi; fp16/bf16;
d 64/128) and the mma atomic tiles of the defaults/experiments (ARCH). tools/sass_hashes.one.
    PYTHONPATH=REPO python .ab/sass_atomic.py REPO OUT.json ARCH"""
import dataclasses, json, sys
from concurrent.futures import ProcessPoolExecutor
repo, out, arch = sys.argv[1:4]
sys.path.insert(0, repo)
sys.path.insert(0, repo + "/tools")
from sass_hashes import one
from cuflash.tile import TileConfig
from cuflash.gpu import build, plan, precompile
specs = {}
if arch == "sm_90":
    ws = TileConfig(64, 128, 12, 2, "wgmma")
    for dt in ("float16", "bfloat16"):
        for d in (64, 128):
            for det in (True, False):
                for causal in (False, True):
                    for s in plan.specs_for(dt, d, ws, causal, True, det):
                        if s.role == "bwd_dkdv":
                            specs[s.name] = s
                            v = dataclasses.replace(s, variant=plan.Variant(
                                "causal" if causal else "dense", softcap=True, alibi=True))
                            specs[v.name] = v
for s in precompile.default_specs(arch) + precompile.experiment_specs():
    if s.family == "mma" and s.atomic_dq and (arch == "sm_90" or s.arch is None):
        specs[s.name] = s
todo = [(repo, k, build.source(s), arch) for k, s in sorted(specs.items())]
with ProcessPoolExecutor(2) as ex:
    res = dict(ex.map(one, todo))
json.dump(res, open(out, "w"), indent=0, sort_keys=True)
print(len(res), "kernels", sum(v.startswith("COMPILE") for v in res.values()), "errors")
