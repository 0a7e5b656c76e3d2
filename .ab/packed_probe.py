"""(Written for the tree before 7b206c3, whose Seq::of it rewrites: its variants other than base no
longer apply to main; calls 79-82 ran it; NOTES v23. The follow-up on main: packed_probe2.py.)

Issue 12: which part of the packed kernel's Seq costs the causal forward its ~4.7% on 16 equal
sequences of 4096 (call 71). The packed kernel's Seq::of, rewritten in the source text:
  base   as on main
  lens   lengths from the parameters (p.T_len, p.S_len), q0/k0 from cu_seqlens
  starts q0 = b·T_len, k0 = b·S_len from the parameters, lengths from cu_seqlens
  none   everything from the parameters (the packed kernel doing the dense kernel's arithmetic)
  tq/sk  only the query / only the key length from cu_seqlens
  shfl   as base, each value broadcast from lane 0
  maskp  as base, but the Mask takes the parameters' lengths
  diagp  as base, but the Mask's diagonal from the parameters' lengths
  lenp   as base, but the Mask's T_len and S_len from the parameters
  self   keys as the queries (one pair of offsets loaded; the diagonal folds to 0)
  blockp as base, but QueryBlock's rows and active take the parameters' T_len
Each run: dense on the (B, H, T, d) copy, the packed arrays' view through the dense kernel, and
the packed kernel, one causal forward each inside the profiler range (3 times).
    ncu --profile-from-start off --metrics gpu__time_duration.sum python .ab/packed_probe.py VARIANT"""
import sys

from packed_case import check, profile, rewrite_packed_source, runs

SEQ = """            s.q0 = p.cu_seqlens_q[b];
            s.T_len = p.cu_seqlens_q[b + 1] - s.q0;
            s.k0 = p.cu_seqlens_k[b];
            s.S_len = p.cu_seqlens_k[b + 1] - s.k0;"""
MASK = """T_len(seq.T_len), S_len(seq.S_len),
          diag(seq.S_len - seq.T_len),"""
BLOCK = "rows(min(BLOCK_M, seq.T_len - i0)), active(at.in_grid && i0 < seq.T_len)"
NEW = {   # variant: [(text, replacement), ...]
    "base": [],
    "lens": [(SEQ, """            s.q0 = p.cu_seqlens_q[b]; s.T_len = p.T_len;
            s.k0 = p.cu_seqlens_k[b]; s.S_len = p.S_len;""")],
    "starts": [(SEQ, """            s.q0 = b * p.T_len; s.T_len = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
            s.k0 = b * p.S_len; s.S_len = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];""")],
    "none": [(SEQ, """            s.q0 = b * p.T_len; s.T_len = p.T_len;
            s.k0 = b * p.S_len; s.S_len = p.S_len;""")],
    "tq": [(SEQ, """            s.q0 = p.cu_seqlens_q[b];
            s.T_len = p.cu_seqlens_q[b + 1] - s.q0;
            s.k0 = p.cu_seqlens_k[b]; s.S_len = p.S_len;""")],
    "sk": [(SEQ, """            s.q0 = p.cu_seqlens_q[b]; s.T_len = p.T_len;
            s.k0 = p.cu_seqlens_k[b];
            s.S_len = p.cu_seqlens_k[b + 1] - s.k0;""")],
    "shfl": [(SEQ, """            s.q0 = __shfl_sync(0xffffffffu, p.cu_seqlens_q[b], 0);
            s.T_len = __shfl_sync(0xffffffffu, p.cu_seqlens_q[b + 1], 0) - s.q0;
            s.k0 = __shfl_sync(0xffffffffu, p.cu_seqlens_k[b], 0);
            s.S_len = __shfl_sync(0xffffffffu, p.cu_seqlens_k[b + 1], 0) - s.k0;""")],
    "maskp": [(MASK, """T_len(params.T_len), S_len(params.S_len),
          diag(params.S_len - params.T_len),""")],
    "diagp": [(MASK, """T_len(seq.T_len), S_len(seq.S_len),
          diag(params.S_len - params.T_len),""")],
    "lenp": [(MASK, """T_len(params.T_len), S_len(params.S_len),
          diag(seq.S_len - seq.T_len),""")],
    "self": [(SEQ, """            s.q0 = p.cu_seqlens_q[b];
            s.T_len = p.cu_seqlens_q[b + 1] - s.q0;
            s.k0 = s.q0; s.S_len = s.T_len;""")],
    "blockp": [(BLOCK, "rows(min(BLOCK_M, p.T_len - i0)), active(at.in_grid && i0 < p.T_len)")],
}
variant = sys.argv[1] if len(sys.argv) > 1 else "base"
rewrite_packed_source(NEW[variant])
fns = runs("seqlens")
check(fns, variant)
profile(fns, times=3)
