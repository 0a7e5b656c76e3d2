"""sha256 of the cubin NVRTC builds for every x3 kernel (argv[1]: another family regex) that
precompile builds for sm_90, one line each: run before and after a change meant to leave the machine code alone, and diff (no
cuobjdump on this machine; a comment-only edit leaves the bytes equal)."""
import concurrent.futures as cf, hashlib, re, sys
from cuflash.gpu import build, precompile


def one(spec):
    path = build.cubin_for_arch(build.source(spec), spec.name, spec.arch or "sm_90")
    return spec.name, hashlib.sha256(path.read_bytes()).hexdigest()[:16]


pattern = sys.argv[1] if sys.argv[1:] else "wgmma_f16x3"   # a regex on the kernel family
specs = [s for s in precompile.default_specs("sm_90") if re.fullmatch(pattern, s.family)]
with cf.ProcessPoolExecutor(2) as pool:
    for name, h in sorted(pool.map(one, specs)):
        print(name, h)
