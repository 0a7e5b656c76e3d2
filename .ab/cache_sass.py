"""SASS hashes of the decode (KV-cache) forward kernels of a tree, for showing that two trees
compile them to the same machine code (NOTES v28: call 110's table stands for the cache-only
swizzle).   PYTHONPATH=REPO python .ab/cache_sass.py REPO OUT.json"""
import json
import sys

repo, out = sys.argv[1:3]
sys.path.insert(0, repo)
sys.path.insert(0, "/work/main/tools")
from sass_hashes import one  # noqa: E402

from cuflash import TileConfig  # noqa: E402
from cuflash.gpu import build  # noqa: E402
from cuflash.gpu.plan import KernelSpec, Variant  # noqa: E402

todo = []
for dt in ("float16", "bfloat16"):
    for tile in (TileConfig(16, 64, 4, 2, "mma"), TileConfig(16, 64, 4, 3, "mma"),
                 TileConfig(32, 64, 4, 2, "mma")):
        for cache in ("cache", "paged"):
            for split in (False, True):
                for mask in ("dense", "causal"):
                    s = KernelSpec("fwd", dt, 128, tile, Variant(mask=mask, split=split, cache=cache))
                    todo.append((repo, s.name, build.source(s), "sm_90"))
res = dict(map(one, todo))
json.dump(res, open(out, "w"), indent=1)
print(len(res), "kernels,", sum("ERROR" in v for v in res.values()), "errors")
