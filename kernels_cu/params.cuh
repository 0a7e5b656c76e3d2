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
// Strides of an array, in elements: [sequence, head, row] (seq.cuh says how they are read).
typedef long long Strides[3];
typedef long long RowStrides[2];

// A window side that is not bounded (None / -1 in Python): far enough that i + diag ± it never
// limits a key, small enough that the sums stay in int.
constexpr int kUnbounded = 1 << 30;

// Fields every pass reads: shapes, the packing, the mask, the score modifiers and a custom
// mask's captures.
//   batch: sequences; heads: query heads (axis -3 of q); group: query heads per kv head (GQA:
//          query head h reads kv head h / group; 1 without GQA)
//   T_len, S_len: the query and key counts of every sequence, or their maxima when packed
//   cu_seqlens_q, cu_seqlens_k: a packed batch's (batch + 1) row offsets (flash_attn_varlen's
//          convention); null when every sequence has T_len queries and S_len keys
//   lse_stride: where lse (and D, and dq_accum's rows) of (sequence, head) start: [sequence,
//          head] strides of cuflash's own (batch, heads, T) or packed (heads, total_q) arrays
//   window_left, window_right: the band of keys each query sees (cuflash/mask.py), kUnbounded
//          for an open side
//   scale: multiplies q·k; scale_log2 = scale·log2(e); softcap: c of c·tanh(s / c) (0: none)
//   num_splits: split-KV's blocks per query tile (the forward's; 1 everywhere else)
//   sched_rows: the most grid rows of one section of the order blocks start in whose streamed
//          operands fit the L2 (block.cuh, GridTile); wave_q, wave_k: the blocks resident at
//          once (SMs × blocks per SM) of this pass's query-tile kernel (forward, dQ) and key-tile
//          kernel (dK/dV)
//   alibi_slopes: (batch·heads,) slope of each (sequence, query head), natural-log units
//   mm_tensor, mm_shape, mm_int: the arrays (C-contiguous int32), their shapes and the ints a
//          mask_mod captured
//   mm_count, mm_index: a mask_mod's tile lists (mask.cuh, TileLists): for each outer tile (a
//          query tile; a key tile in the dK/dV kernel) the count and the (index << 1 | partial)
//          of the inner tiles it visits, mm_inner slots each (mm_count_stride outer tiles per
//          (sequence, query head)); mm_batched: 1 when the lists differ per (sequence, head)
//          (the mask reads b or h), 0 when one list serves all
#define CUFLASH_COMMON_FIELDS(X)            \
    X(const Acc*, alibi_slopes)             \
    X(MaskModTensors, mm_tensor)            \
    X(int*, mm_count)                       \
    X(int*, mm_index)                       \
    X(const int*, cu_seqlens_q)             \
    X(const int*, cu_seqlens_k)             \
    X(RowStrides, lse_stride)               \
    X(int, batch)                           \
    X(int, heads)                           \
    X(int, group)                           \
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
    X(Acc, softcap)                         \
    X(int, num_splits)                      \
    X(int, sched_rows)                      \
    X(int, wave_q)                          \
    X(int, wave_k)

// A tensor map of the Tensor Memory Accelerator (CUDA's CUtensorMap: 128 opaque bytes, 64-byte
// aligned), built on the host (cuflash/gpu/tma.py, cuTensorMapEncodeTiled) and read by the copy
// engine straight from the parameter struct (kernels_cu/tma.cuh).
struct alignas(64) TensorMap {
    unsigned long long word[16];
};
typedef TensorMap FwdTensorMaps[3];   // q, k, v
typedef TensorMap BwdTensorMaps[5];   // q, k, v, dout, dq_accum (float, atomic dQ)

// The forward: q (sequences, heads, T_len, d), k and v (sequences, heads / group, S_len, d) in,
// each with its own strides (x_stride); out (strides out_stride) and lse (lse_stride), natural
// log, -inf for a query that sees no key, out. Split-KV (num_splits > 1): the key tiles of each
// query tile are shared out over num_splits blocks (block.cuh, QueryBlock), each writing its
// O_s (normalized by its own l) and lse_s as floats to out_accum (split, lse row, d) and
// lse_accum (split, lse row), split_rows lse rows per split; the last split of a query tile to
// finish merges them into out and lse (split_combine.cuh), counted in split_counter (one int per
// (sequence·heads + head, query tile), zero at launch and left zero). A KV cache (Variant CACHE, decoding): sequence b has seqused_k[b] + seqused_add
// keys (the cache's tokens and those appended by this call), clamped to 0..S_len (the capacity),
// the first of them at row 0 of k and v (sequences, heads / group, rows, d); paged
// (kPagedCache): k and v are a pool of num_pages pages (pages, heads / group, 2^page_shift, d)
// and key j of sequence b is row j mod 2^page_shift of page block_table[b·table_stride +
// (j >> page_shift)], clamped to 0..num_pages - 1: x_stride[0] steps a page. The clamps keep
// every read inside the arrays when the caller skipped the host's checks of these indices
// (attention_with_kvcache's validate=False). k_new, v_new (sequences, heads / group,
// seqused_add, d), with their strides: when not null, the seqused_add keys after seqused_k[b]
// are their rows, which this launch also writes into the cache (pipeline.cuh, write_appended);
// null: those keys are in the cache already. Null / 0 without a cache. tma: tensor maps of q, k
// and v as (sequences, heads, rows, d) arrays, 64 columns × a tile's rows per copy, 128-byte
// swizzled, for the warp-specialized forward's copy-engine loads; tma_loads 1 when they are set
// (0: its producer's threads copy with cp.async). First in the struct: its 64-byte aligned start.
#define CUFLASH_FWD_FIELDS(X)               \
    X(FwdTensorMaps, tma)                   \
    X(int, tma_loads)                       \
    X(const T*, q)                          \
    X(const T*, k)                          \
    X(const T*, v)                          \
    X(T*, out)                              \
    X(Acc*, lse)                            \
    X(Strides, q_stride)                    \
    X(Strides, k_stride)                    \
    X(Strides, v_stride)                    \
    X(Strides, out_stride)                  \
    X(Acc*, out_accum)                      \
    X(Acc*, lse_accum)                      \
    X(long long, split_rows)                \
    X(int*, split_counter)                  \
    X(const int*, seqused_k)                \
    X(const int*, block_table)              \
    X(int, table_stride)                    \
    X(int, page_shift)                      \
    X(int, seqused_add)                     \
    X(int, num_pages)                       \
    X(const T*, k_new)                      \
    X(const T*, v_new)                      \
    X(Strides, k_new_stride)                \
    X(Strides, v_new_stride)                \
    CUFLASH_COMMON_FIELDS(X)

// The backward: the forward's q, k, v, out, lse and dout in; D = rowsum(dO ∘ O) (lse's layout)
// written by the preprocess and read by the others; dq, dk, dv out in G (T, or float for
// precision 'tf32' on the 16-bit kernels: cuflash/gpu/f16_scaled.py; dk, dv: one per kv head,
// summed over its group), each the sum of its products times its factor: dq_scale, dk_scale
// (scale, or the copies' factors) and dv_scale (1, or the copies'); dq_accum (lse's rows × d), zeroed, summed by atomics when dQ is
// accumulated in the dK/dV kernel (deterministic=False). A dK/dV block walks group_chunk query
// heads of a group; with group_chunk < group, dk_accum and dv_accum (float, shaped and strided
// as dk and dv) and dkdv_sem (one counter per sequence, kv head and key tile, zeroed) carry the
// sum of a group's blocks (block.cuh KeyBlock, epilogue.cuh store_dkdv). Every q-, k- or
// v-shaped array has its own strides. tma: tensor maps of q, k, v and dout (boxes of 64 rows:
// one set serves the dK/dV and the dQ kernels) for the warp-specialized kernels' copy-engine
// loads, and with atomic dQ one of dq_accum (boxes of 64 rows × 32 floats) for its reductions;
// tma_loads 1 when they are set.
#define CUFLASH_BWD_FIELDS(X)               \
    X(BwdTensorMaps, tma)                   \
    X(int, tma_loads)                       \
    X(const T*, q)                          \
    X(const T*, k)                          \
    X(const T*, v)                          \
    X(const T*, out)                        \
    X(const T*, dout)                       \
    X(const Acc*, lse)                      \
    X(Acc*, D)                              \
    X(G*, dq)                               \
    X(G*, dk)                               \
    X(G*, dv)                               \
    X(Acc, dq_scale)                        \
    X(Acc, dk_scale)                        \
    X(Acc, dv_scale)                        \
    X(Acc*, dq_accum)                       \
    X(Acc*, dk_accum)                       \
    X(Acc*, dv_accum)                       \
    X(int*, dkdv_sem)                       \
    X(int, group_chunk)                     \
    X(Strides, q_stride)                    \
    X(Strides, k_stride)                    \
    X(Strides, v_stride)                    \
    X(Strides, out_stride)                  \
    X(Strides, dout_stride)                 \
    X(Strides, dq_stride)                   \
    X(Strides, dk_stride)                   \
    X(Strides, dv_stride)                   \
    CUFLASH_COMMON_FIELDS(X)

#define CUFLASH_DECLARE_FIELD(type, name) type name;

template <typename T, typename Acc_>
struct FwdParams {
    using Elem = T;
    using Acc = Acc_;
    CUFLASH_FWD_FIELDS(CUFLASH_DECLARE_FIELD)
};

template <typename T, typename Acc_, typename G = T>
struct BwdParams {
    using Elem = T;
    using Acc = Acc_;
    using Grad = G;   // dq, dk, dv's type
    CUFLASH_BWD_FIELDS(CUFLASH_DECLARE_FIELD)
};

// The flattened batch index of this block: blockIdx.y, continued by blockIdx.z past the 65535
// limit of gridDim.y (the host launches (x, min(batch, 65535), ceil(batch / 65535))).
__device__ __forceinline__ int batch_index() { return blockIdx.z * gridDim.y + blockIdx.y; }

// The accumulator of a storage type: double for double, float for every other.
template <typename T> struct Accum { using type = float; };
template <> struct Accum<double> { using type = double; };

}  // namespace cuflash
