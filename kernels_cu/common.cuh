// cuflash: numeric helpers shared by every kernel. Compiled by NVRTC (no <cuda.h>, no libc).
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace cuflash {

// Softmax runs in base 2: scores are kept as s·scale·log2(e) so that p = 2^(s - m) is one ex2
// instruction; lse is converted back to natural log when written.
constexpr double kLog2e = 1.4426950408889634074;
constexpr double kLn2 = 0.6931471805599453094;

// 2^x by the special-function unit alone (ex2.approx.ftz: ~2 ulp, subnormal results flushed to
// 0); exp2f adds range fix-ups around it. P is rounded to 16 bits right after, so the ulps vanish.
__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// tanh(k·x) = 1 - 2 / (2^(2·log2(e)·k·x) + 1) from two special-function ops (ex2.approx and
// __fdividef's reciprocal) and three FMA-pipe ops (k folds into the exponent's multiply); absolute
// error about 2.4e-7 against float64 tanh, 1 and -1 exactly where 2^(...) overflows or flushes to
// 0. A form with one special-function op (the reciprocal of 1 + e, e = 2^(-2·log2(e)·k·|x|), by a
// minimax quadratic and two Newton steps on the FMA pipe, ~12 more ops) was slower on the H200:
// softcap 1.66 / 1.65x of plain forward against this form's 1.37 / 1.47 (non-causal / causal,
// same call, NOTES v17-v18): the consumer warps are bound by instruction issue before the
// special-function unit. tanhf's range reduction and polynomial cost about 20 more ops;
// tanh.approx.f32 (one op) has relative error 2^-11: lse, kept in float32, then misses its
// float32 criterion by 1-3x with softcap (H200, NOTES v10).
__device__ __forceinline__ float tanh_fast(float x, float k = 1.f) {
    return 1.f - __fdividef(2.f, ex2_approx(x * (k * float(2.0 * kLog2e))) + 1.f);
}

// Order between thread blocks at GPU scope, after CUTLASS's generic barrier: one thread loads
// with acquire, stores with release or adds with both, and the block's barrier orders the other
// threads' accesses around it (bar.sync before a release, after an acquire), so the block pays one
// fence where a __threadfence() by every thread would pay one each (NOTES v29, call 121).
__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release_gpu(int* p, int v) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// atomic p += v with acquire and release; returns the old value
__device__ __forceinline__ int atom_add_acq_rel_gpu(int* p, int v) {
    int old;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;\n"
                 : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}

// Thread-block clusters (sm_90; a kernel compiled with __cluster_dims__): the cluster barrier
// (every thread of every block of the cluster arrives; the arrival releases, the wait acquires,
// at cluster scope) and loads from another block's shared memory (the distributed shared memory:
// mapa turns an address of this block's shared memory into the same place in block `rank`'s).
__device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ unsigned cluster_map(unsigned smem_address, unsigned rank) {
    unsigned out;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(smem_address), "r"(rank));
    return out;
}
__device__ __forceinline__ float cluster_ld(unsigned address) {
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(address) : "memory");
    return v;
}
__device__ __forceinline__ float4 cluster_ld4(unsigned address) {   // 16-byte aligned
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(address) : "memory");
    return v;
}

// One of two types by a compile-time condition (std::conditional_t, which NVRTC lacks)
template <bool C, class A, class B> struct PickT { using type = A; };
template <class A, class B> struct PickT<false, A, B> { using type = B; };
template <bool C, class A, class B> using Pick = typename PickT<C, A, B>::type;

// The PTX name of a 16-bit storage type in a tensor-core instruction ("f16", "bf16"). An asm
// string must be a literal, so a wrapper writes its instruction once as a macro ASM(ty) that
// pastes the name into the string, and CUFLASH_PTX16(T, ASM) expands it for T (no other type).
template <typename T> struct Ptx16;
template <> struct Ptx16<__half> { static constexpr bool kBf16 = false; };
template <> struct Ptx16<__nv_bfloat16> { static constexpr bool kBf16 = true; };
#define CUFLASH_PTX16(T, ASM)                                \
    do {                                                     \
        if constexpr (::cuflash::Ptx16<T>::kBf16) ASM("bf16"); \
        else ASM("f16");                                     \
    } while (0)

template <typename Acc> struct Num;
template <> struct Num<float> {
    static __device__ __forceinline__ float exp2(float x) { return exp2f(x); }
    static __device__ __forceinline__ float log2(float x) { return log2f(x); }
    static __device__ __forceinline__ float inf() { return __int_as_float(0x7f800000); }
    static __device__ __forceinline__ float max(float a, float b) { return fmaxf(a, b); }
    // a·b rounded once, never fused into a later add (softmax.cuh's running max)
    static __device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
    static __device__ __forceinline__ float tanh(float x) { return tanhf(x); }
    static __device__ __forceinline__ float abs(float x) { return fabsf(x); }
};
template <> struct Num<double> {
    static __device__ __forceinline__ double exp2(double x) { return ::exp2(x); }
    static __device__ __forceinline__ double log2(double x) { return ::log2(x); }
    static __device__ __forceinline__ double inf() { return __longlong_as_double(0x7ff0000000000000LL); }
    static __device__ __forceinline__ double max(double a, double b) { return fmax(a, b); }
    static __device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
    static __device__ __forceinline__ double tanh(double x) { return ::tanh(x); }
    static __device__ __forceinline__ double abs(double x) { return ::fabs(x); }
};

// -- conversions between the storage type T and the accumulator type Acc
template <typename Acc> __device__ __forceinline__ Acc to_acc(__half x) { return Acc(__half2float(x)); }
template <typename Acc> __device__ __forceinline__ Acc to_acc(__nv_bfloat16 x) { return Acc(__bfloat162float(x)); }
template <typename Acc> __device__ __forceinline__ Acc to_acc(float x) { return Acc(x); }
template <typename Acc> __device__ __forceinline__ Acc to_acc(double x) { return Acc(x); }

template <typename T> struct Store;
template <> struct Store<__half> {
    static __device__ __forceinline__ __half from(float x) { return __float2half_rn(x); }
};
template <> struct Store<__nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat16 from(float x) { return __float2bfloat16_rn(x); }
};
template <> struct Store<float> {
    static __device__ __forceinline__ float from(float x) { return x; }
};
template <> struct Store<double> {
    static __device__ __forceinline__ double from(double x) { return x; }
};

// Round an accumulator value to the storage precision and back: the kernels feed P and dS to
// their matrix products in T's precision (what the tensor cores take), and the CPU twin does the
// same, so both compute one function.
template <typename T, typename Acc>
__device__ __forceinline__ Acc round_to(Acc x) {
    if constexpr (sizeof(T) < 4) return to_acc<Acc>(Store<T>::from(float(x)));
    else return x;
}

// 16 bytes of T from global memory, converted to Acc. `g` must be 16-byte aligned.
template <typename T, typename Acc>
__device__ __forceinline__ void load16(const T* g, Acc (&out)[16 / sizeof(T)]) {
    constexpr int E = 16 / sizeof(T);
    uint4 raw = *reinterpret_cast<const uint4*>(g);
    const T* vals = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int e = 0; e < E; ++e) out[e] = to_acc<Acc>(vals[e]);
}

// A 16-byte vector of Acc in shared memory (4 floats or 2 doubles).
template <typename Acc> struct Vec16;
template <> struct Vec16<float> { using type = float4; };
template <> struct Vec16<double> { using type = double2; };

template <typename Acc>
__device__ __forceinline__ void lds16(const Acc* s, Acc (&out)[16 / sizeof(Acc)]) {
    using V = typename Vec16<Acc>::type;
    *reinterpret_cast<V*>(out) = *reinterpret_cast<const V*>(s);
}

// Bytes of dynamic shared memory this launch has (the %dynamic_smem_size register).
__device__ __forceinline__ unsigned dynamic_smem_bytes() {
    unsigned n;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
    return n;
}

// A shared-memory address as the 32-bit offset that PTX's shared-space instructions take
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Bytes of this launch's dynamic shared memory from p (inside it) to its end: a launch may give a
// kernel more than its layout's kSmemBytes (cuflash/gpu/ops.py, merge_room_bytes)
__device__ __forceinline__ unsigned dynamic_smem_from(const void* p) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    return dynamic_smem_bytes() - (smem_addr(p) - smem_addr(smem_raw));
}

// The dynamic shared memory a kernel asks for to hold its layout S at an ALIGN-byte boundary
// (smem_as): sizeof(S), and past 16 bytes of alignment ALIGN more for the padding to the first
// boundary (1024: the wgmma kernels' swizzled panels). A kernel's kSmemBytes, which the host
// launches it with (cuflash/gpu/build.py, smem_bytes).
template <class S, unsigned ALIGN = 16>
__host__ __device__ constexpr int smem_budget() {
    return sizeof(S) + (ALIGN > 16 ? ALIGN : 0);
}

// The kernel's shared-memory layout S in dynamic shared memory, after checking the launch gave it
// `bytes` (its kSmemBytes, smem_budget<S, ALIGN>): at the start (ALIGN 16), or at the first
// ALIGN-byte boundary.
template <class S, unsigned ALIGN = 16>
__device__ __forceinline__ S& smem_as(unsigned bytes) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    if (dynamic_smem_bytes() < bytes) __trap();
    if constexpr (ALIGN <= 16) {
        return *reinterpret_cast<S*>(smem_raw);
    } else {
        const unsigned pad = (ALIGN - (smem_addr(smem_raw) & (ALIGN - 1))) & (ALIGN - 1);
        return *reinterpret_cast<S*>(smem_raw + pad);
    }
}

}  // namespace cuflash
