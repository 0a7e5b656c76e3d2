"""SASS fingerprints of cuflash kernels, for refactors that must not change the machine code.

    python tools/sass_hashes.py REPO OUT.json [--arch sm_90|sm_80] [--filter SUBSTR]
                                [--match REGEX] [--jobs 2]
    python tools/sass_hashes.py --compare BEFORE.json AFTER.json     (exit 1 when any differ)

Compiles every kernel spec of `cuflash.gpu.precompile` (the defaults on that arch, their
register-tight variants, the experiments' tiles, the decode and the split-KV kernels; the same
set `python -m cuflash compile` checks) with nvcc -cubin, disassembles with cuobjdump -sass and writes {kernel name: sha1 of
the instruction lines} to OUT.json. Compare two such files with --compare A.json B.json.
Needs nvcc and cuobjdump (CUOBJDUMP= or on PATH; pip's nvidia-cuda-cuobjdump has one) with
nvdisasm beside it or on NVDISASM_PATH (pip's nvidia-cuda-nvdisasm); a kernel that gives no
SASS counts as an error, not as a hash. REPO's
cuflash is imported: run it with PYTHONPATH=REPO so that the tree compared is the one imported.
The check behind NOTES v19's "SASS identical" refactors.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor

CUOBJDUMP = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump") or "cuobjdump"


def one(args):
    repo, name, src, arch = args
    with tempfile.TemporaryDirectory() as tmp:
        f = os.path.join(tmp, name + ".cu")
        with open(f, "w") as fh:
            fh.write(src)
        cub = f[:-3] + ".cubin"
        arch_flag = "sm_90a" if arch == "sm_90" else arch
        r = subprocess.run(["nvcc", "-cubin", f"-arch={arch_flag}", "-std=c++17", "-O3", "-I",
                            os.path.join(repo, "kernels_cu"), "-o", cub, f],
                           capture_output=True, text=True)
        if r.returncode:
            return name, "COMPILE ERROR: " + r.stderr[-800:]
        dis = subprocess.run([CUOBJDUMP, "-sass", cub], capture_output=True, text=True)
        lines = [l.split("*/", 1)[-1].strip() for l in dis.stdout.splitlines()
                 if "/*" in l and "Function" not in l]
        if not lines:   # e.g. cuobjdump without nvdisasm (NVDISASM_PATH): no hash of nothing
            return name, "COMPILE ERROR: no SASS from cuobjdump: " + dis.stderr[-400:]
        return name, hashlib.sha1("\n".join(lines).encode()).hexdigest()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs=2, metavar="PATH",
                    help="REPO OUT.json, or with --compare BEFORE.json AFTER.json")
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--arch", default="sm_90", choices=("sm_80", "sm_90"))
    ap.add_argument("--filter", default="", help="only kernels whose name contains this")
    ap.add_argument("--match", default="", help="only kernels whose name this regex searches")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args(argv)
    if a.compare:
        x, y = (json.load(open(p)) for p in a.paths)
        diff = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
        print(f"{len(x)} / {len(y)} kernels, {len(diff)} differ")
        for k in diff[:50]:
            print("  ", k, str(x.get(k))[:60], "|", str(y.get(k))[:60])
        return 1 if diff else 0
    repo, out = a.paths
    sys.path.insert(0, repo)
    from cuflash.gpu import build, precompile
    specs = {s.name: s for s in precompile.default_specs(a.arch) + precompile.experiment_specs()
             + precompile.decode_specs(a.arch) + precompile.split_specs(a.arch)}
    if a.arch != "sm_90":
        specs = {k: s for k, s in specs.items() if s.arch is None}   # wgmma kernels: sm_90a only
    pick = re.compile(a.match)
    todo = [(repo, k, build.source(s), a.arch) for k, s in sorted(specs.items())
            if a.filter in k and pick.search(k)]
    with ProcessPoolExecutor(a.jobs) as ex:
        res = dict(ex.map(one, todo))
    with open(out, "w") as f:
        json.dump(res, f, indent=0, sort_keys=True)
    bad = [k for k, v in res.items() if v.startswith("COMPILE")]
    print(f"{len(res)} kernels, {len(bad)} compile errors -> {out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
