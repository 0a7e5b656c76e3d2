// cuflash: the arguments of every attention kernel, one struct per pass, passed by value
// (__grid_constant__). The fields are listed once, in the X-macros below: cuflash/gpu/params.py
// reads the struct's layout (names, offsets, sizes) from NVRTC and fills it by name, so the C++
// here is the only place that says what a kernel takes.
#pragma once

namespace cuflash {

// Array fields, named so that the X-macros below take them as one type argument.
typedef const int* MaskModTensors[4];
typedef int MaskModShapes[4][4];
typedef int MaskModInts[4];

// A window side that is not bounded (None / -1 in Python): far enough that i + diag ± it never
// limits a key, small enough that the sums stay in int.
constexpr int kUnbounded = 1 << 30;

// Fields every pass reads: shapes, the mask, the score modifiers and a custom mask's captures.
//   heads: size of the head axis (-3) of the caller's arrays, so that a flattened batch index
//          bz is (b, h) = (bz / heads, bz % heads) for a mask_mod
//   window_left, window_right: the band of keys each query sees (cuflash/mask.py), kUnbounded
//          for an open side
//   scale: multiplies q·k; scale_log2 = scale·log2(e); softcap: c of c·tanh(s / c) (0: none)
//   alibi_slopes: (batch,) slope of each flattened batch entry, natural-log units (ALiBi only)
//   mm_tensor, mm_shape, mm_int: the arrays (C-contiguous int32), their shapes and the ints a
//          mask_mod captured
//   mm_count, mm_index: a mask_mod's tile lists (mask.cuh, TileLists): for each outer tile (a
//          query tile; a key tile in the dK/dV kernel) the count and the (index << 1 | partial)
//          of the inner tiles it visits, mm_inner slots each (mm_count_stride outer tiles per
//          batch entry); mm_batched: 1 when the lists differ
//          per batch entry (the mask reads b or h), 0 when one list serves all
#define CUFLASH_COMMON_FIELDS(X)            \
    X(const Acc*, alibi_slopes)             \
    X(MaskModTensors, mm_tensor)            \
    X(int*, mm_count)                       \
    X(int*, mm_index)                       \
    X(int, batch)                           \
    X(int, heads)                           \
    X(int, T_len)                           \
    X(int, S_len)                           \
    X(int, d)                               \
    X(int, window_left)                     \
    X(int, window_right)                    \
    X(MaskModShapes, mm_shape)              \
    X(MaskModInts, mm_int)                  \
    X(int, mm_inner)                        \
    X(int, mm_count_stride)                 \
    X(int, mm_batched)                      \
    X(Acc, scale)                           \
    X(Acc, scale_log2)                      \
    X(Acc, softcap)

// The forward: q (batch, T_len, d), k and v (batch, S_len, d) in; out (batch, T_len, d) and
// lse (batch, T_len), natural log, -inf for a query that sees no key, out.
#define CUFLASH_FWD_FIELDS(X)               \
    X(const T*, q)                          \
    X(const T*, k)                          \
    X(const T*, v)                          \
    X(T*, out)                              \
    X(Acc*, lse)                            \
    CUFLASH_COMMON_FIELDS(X)

// The backward: the forward's q, k, v, out, lse and dout in; D = rowsum(dO ∘ O) (batch, T_len)
// written by the preprocess and read by the others; dq, dk, dv out; dq_accum (batch, T_len, d),
// zeroed, summed by atomics when dQ is accumulated in the dK/dV kernel (deterministic=False).
#define CUFLASH_BWD_FIELDS(X)               \
    X(const T*, q)                          \
    X(const T*, k)                          \
    X(const T*, v)                          \
    X(const T*, out)                        \
    X(const T*, dout)                       \
    X(const Acc*, lse)                      \
    X(Acc*, D)                              \
    X(T*, dq)                               \
    X(T*, dk)                               \
    X(T*, dv)                               \
    X(Acc*, dq_accum)                       \
    CUFLASH_COMMON_FIELDS(X)

#define CUFLASH_DECLARE_FIELD(type, name) type name;

template <typename T, typename Acc>
struct FwdParams {
    CUFLASH_FWD_FIELDS(CUFLASH_DECLARE_FIELD)
};

template <typename T, typename Acc>
struct BwdParams {
    CUFLASH_BWD_FIELDS(CUFLASH_DECLARE_FIELD)
};

// The flattened batch index of this block: blockIdx.y, continued by blockIdx.z past the 65535
// limit of gridDim.y (the host launches (x, min(batch, 65535), ceil(batch / 65535))).
__device__ __forceinline__ int batch_index() { return blockIdx.z * gridDim.y + blockIdx.y; }

// The accumulator of a storage type: double for double, float for every other.
template <typename T> struct Accum { using type = float; };
template <> struct Accum<double> { using type = double; };

}  // namespace cuflash
