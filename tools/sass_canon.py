#!/usr/bin/env python3
"""Compare two trees' SASS for the kernels whose hashes differ (tools/sass_hashes.py), up to a
consistent renaming of registers, predicates and uniform registers (canonical numbering by first
appearance): equal means the same program with other register names.

    python tools/sass_canon.py BASE_REPO NEW_REPO sm_80|sm_90 BASE.json NEW.json

Prints per kernel: name, instruction counts, equal up to renaming, lines that differ as written.
Needs nvcc and cuobjdump (CUOBJDUMP=, or on PATH, with nvdisasm beside it).
"""
import json, os, re, shutil, subprocess, sys, tempfile
from concurrent.futures import ProcessPoolExecutor
CUOBJ = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump") or "cuobjdump"
TOK = re.compile(r"\b(UR\d+|R\d+|UP\d|P\d)\b")

def sass(args):
    repo, name, arch = args
    code = f"""
import sys; sys.path.insert(0, {repo!r})
from cuflash.gpu import build, precompile
specs = {{s.name: s for s in precompile.default_specs({arch!r}) + precompile.experiment_specs()}}
sys.stdout.write(build.source(specs[{name!r}]))
"""
    src = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    with tempfile.TemporaryDirectory() as t:
        f = os.path.join(t, "k.cu"); open(f, "w").write(src)
        subprocess.run(["nvcc", "-cubin", "-arch=" + ("sm_90a" if arch == "sm_90" else arch), "-std=c++17", "-O3",
                        "-I", os.path.join(repo, "kernels_cu"), "-o", f[:-3] + ".cubin", f], check=True, capture_output=True)
        out = subprocess.run([CUOBJ, "-sass", f[:-3] + ".cubin"], capture_output=True, text=True,
                             env=dict(os.environ, PATH=os.path.dirname(os.path.abspath(CUOBJ)) + os.pathsep
                             + os.environ["PATH"])).stdout
    lines = [l.split("*/", 1)[-1].split(";")[0].strip() for l in out.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", l)]
    return lines

def canon(lines):
    m, count = {}, {}
    def sub(t):
        k = t.group(1)
        kind = re.match(r"[A-Z]+", k).group(0)
        if k not in m:
            count[kind] = count.get(kind, 0) + 1
            m[k] = kind + "#" + str(count[kind])
        return m[k]
    return [TOK.sub(sub, l) for l in lines]

def one(args):
    base, new, name, arch = args
    a, b = sass((base, name, arch)), sass((new, name, arch))
    return name, len(a), len(b), canon(a) == canon(b), sum(x != y for x, y in zip(a, b))

if __name__ == "__main__":
    if len(sys.argv) != 6 or {"-h", "--help"} & set(sys.argv[1:]):
        print(f"usage: python tools/sass_canon.py BASE_TREE NEW_TREE ARCH HASHES_A.json "
              f"HASHES_B.json\n{__doc__.strip() if __doc__ else ''}", file=sys.stderr)
        sys.exit(0 if {"-h", "--help"} & set(sys.argv[1:]) else 2)
    base, new, arch, hashes_a, hashes_b = sys.argv[1:6]
    ha, hb = json.load(open(hashes_a)), json.load(open(hashes_b))
    names = sorted(k for k in ha if ha[k] != hb.get(k))
    with ProcessPoolExecutor(2) as ex:
        res = list(ex.map(one, [(base, new, n, arch) for n in names]))
    bad = [r for r in res if not r[3]]
    for r in res: print(*r)
    print(f"{len(res)} differing kernels, {len(res) - len(bad)} equal up to register renaming, {len(bad)} not")
