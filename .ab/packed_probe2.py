"""Issue 12 follow-up (NOTES v23): the general packed kernel (two cu_seqlens arrays) still reads
its causal diagonal from memory and runs ~5% behind the dense kernel on the same work. Candidate:
test the tile's cut as j1 - 1 - diag > i0 + right (the diagonal on the keys' side), so that the
compare's other operand, i0 + right, is uniform, as in every fast probe of calls 79-81. The
rewrite changes the SASS of 58 of the 141 dense d = 128 sm_90 kernels, so it is probed here on
the packed kernel alone, not landed. Variants (the packed kernels' source only):
  self      one array for both (the kPackedSelf kernels: main)
  general   two arrays of equal values (kPacked, main)
  jside     two arrays, with the rewrite
Each run: dense on the (B, H, T, d) copy, the packed arrays' view through the dense kernel, and
the packed kernel, one causal forward each, 3 times, under
    ncu --csv --print-units base --profile-from-start off --metrics gpu__time_duration.sum \
        python .ab/packed_probe2.py VARIANT"""
import sys

from packed_case import check, profile, rewrite_packed_source, runs

CUT = "if (has_right() && j1 - 1 > i0 + diag + right) return true;"
REWRITE = {"jside": [(CUT, "if (has_right() && j1 - 1 - diag > i0 + right) return true;")]}
variant = sys.argv[1] if len(sys.argv) > 1 else "general"
rewrite_packed_source(REWRITE.get(variant, []))
fns = runs("same" if variant == "self" else "copy")
check(fns, variant)
profile(fns, times=3)
