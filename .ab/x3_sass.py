"""sha256 of the cubin NVRTC builds for every x3 kernel precompile builds for sm_90, one line
each: run before and after a change meant to leave the machine code alone, and diff (no
cuobjdump on this machine; a comment-only edit leaves the bytes equal)."""
import concurrent.futures as cf, hashlib
from cuflash.gpu import build, precompile


def one(spec):
    path = build.cubin_for_arch(build.source(spec), spec.name, spec.arch)
    return spec.name, hashlib.sha256(path.read_bytes()).hexdigest()[:16]


specs = [s for s in precompile.default_specs("sm_90") if s.family == "wgmma_f16x3"]
with cf.ProcessPoolExecutor(2) as pool:
    for name, h in sorted(pool.map(one, specs)):
        print(name, h)
