// cuflash: how the warpgroups of a warp-specialized kernel (sm_90) hand work to each other.
//   Mbarrier      a shared-memory barrier with a phase bit (PTX ISA, "mbarrier"): a stage of a
//                 ring is full (the producer's copies landed) or empty (every consumer warp is
//                 done reading it). Phase k of a barrier completes when its count of arrivals
//                 has come; wait(parity) returns once the phase of that parity has completed.
//   StageRing     the stage and the phase parity of tile t in a ring of STAGES buffers
//   StageBarriers a ring's full and empty barriers
//   NamedBarrier  bar.sync / bar.arrive on a hardware barrier id 1..15 (0 is __syncthreads)
//   give_regs, take_regs  setmaxnreg: a warpgroup gives registers up (the producer) or takes
//                 them (the consumers); every thread starts with the kernel's own count.
//   RegisterSplit how many each side gets, and specialize: each warpgroup to its side
//   WarpSpecialized  the warpgroups, ring and register split of a warp-specialized kernel
//   ws_smem       its shared memory, the barriers set before the warpgroups part
#pragma once
#include "mma.cuh"
#include "wgmma_tiles.cuh"

namespace cuflash {

struct Mbarrier {
    unsigned long long word;

    // One thread, before the block's first __syncthreads: `count` arrivals complete a phase
    __device__ __forceinline__ void init(unsigned count) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(&word)), "r"(count)
                     : "memory");
    }
    __device__ __forceinline__ void arrive() {
        asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(&word))
                     : "memory");
    }
    // A whole warp's arrival on a barrier that counts warps, made by lane 0. The __syncwarp
    // first orders every lane's earlier shared-memory reads before lane 0's release: without it
    // only lane 0's own reads are released, and racecheck reports the producer's next writes to
    // the stage against the other lanes' reads (call 164, the x3 dK/dV kernel).
    __device__ __forceinline__ void arrive_per_warp() {
        __syncwarp();
        if ((threadIdx.x & 31) == 0) arrive();
    }
    // This thread's arrival, announcing `bytes` more of the phase's copies (the copy engine's, which
    // count them on the barrier as they land: tma.cuh); the phase completes on both counts
    __device__ __forceinline__ void arrive_expect_tx(unsigned bytes) {
        asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n"
                     ::"r"(smem_addr(&word)), "r"(bytes) : "memory");
    }
    // The arrival of this thread once all of its earlier cp.async copies have landed (the count
    // of the phase stays as init set it: .noinc)
    __device__ __forceinline__ void arrive_on_copies() {
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(&word))
                     : "memory");
    }
    // Both arrivals of a thread that copied by cp.async and stored by plain stores into the
    // phase's buffers: the copies' once they land, the stores' now (a release). A barrier that
    // `threads` threads arrive on so counts after_copies(threads).
    __host__ __device__ static constexpr unsigned after_copies(unsigned threads) {
        return 2 * threads;
    }
    __device__ __forceinline__ void arrive_after_copies() {
        arrive_on_copies();
        arrive();
    }
    __device__ __forceinline__ void wait(int parity) {
        asm volatile(
            "{\n.reg .pred done;\n"
            "WAIT_%=:\n"
            "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
            "@!done bra WAIT_%=;\n}\n" ::"r"(smem_addr(&word)),
            "r"(parity)
            : "memory");
    }
};

// Tile t of a stream through a ring of STAGES buffers: its buffer, and the parity of the phase
// that says it is full (consumers wait for it) or, for the producer, that the tile STAGES before
// it has left (the first round passes at once: the phase "before" phase 0 counts as done).
template <int STAGES>
struct StageRing {
    int stage, parity;
    __device__ __forceinline__ explicit StageRing(int t) : stage(t % STAGES), parity((t / STAGES) & 1) {}
    __device__ __forceinline__ int full_parity() const { return parity; }
    __device__ __forceinline__ int empty_parity() const { return parity ^ 1; }
};

// A ring's barriers: stage s is full once `full` arrivals have come (the producer's threads),
// empty once `empty` have (one per consumer warp). init: one thread, before a __syncthreads.
template <int STAGES>
struct StageBarriers {
    Mbarrier full[STAGES], empty[STAGES];
    __device__ __forceinline__ void init(unsigned full_count, unsigned empty_count) {
        for (int s = 0; s < STAGES; ++s) {
            full[s].init(full_count);
            empty[s].init(empty_count);
        }
    }
};

struct NamedBarrier {
    int id, threads;
    __device__ __forceinline__ void sync() const {
        asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
    }
    __device__ __forceinline__ void arrive() const {
        asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
    }
};

template <int REGS>
__device__ __forceinline__ void take_regs() {
    static_assert(REGS % 8 == 0 && REGS >= 24 && REGS <= 256, "setmaxnreg: 24..256, multiple of 8");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void give_regs() {
    static_assert(REGS % 8 == 0 && REGS >= 24 && REGS <= 256, "setmaxnreg: 24..256, multiple of 8");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

// The registers per thread of a warp-specialized block of NT threads after the hand-over: NC
// consumer warpgroups take CONSUMER each, the producer warpgroup the rest. setmaxnreg moves
// registers within what the block was launched with (kLaunch per thread, what ptxas gives NT
// threads under __launch_bounds__(NT, kBlocks): 168 for 384 threads, 128 for 256 at two blocks),
// not the SM's 65536: a split that asks for more makes the consumers' setmaxnreg.inc wait
// forever (80/216 hung the H200, NOTES v17). A block of one consumer warpgroup runs two to a
// multiprocessor, so that one block's start and stores overlap the other's products (NOTES v64;
// cuflash/tile.py, TileConfig.blocks_per_sm, is the same rule).
template <int NT, int NC, int CONSUMER>
struct RegisterSplit {
    static_assert(NT == 128 * (NC + 1), "one producer and NC consumer warpgroups");
    static constexpr int kBlocks = NC == 1 ? 2 : 1;
    static constexpr int kLaunch = (65536 / (kBlocks * NT)) / 8 * 8;
    // one consumer warpgroup (two blocks, 128 registers a thread at launch): the producer keeps
    // at least kProducerFloor of them, its copy loops' addresses and counters (at 32-40 the
    // producers spilled 4-152 bytes, NVRTC 13, sm_90)
    static constexpr int kProducerFloor = 48;
    static constexpr int kConsumer =
        NC == 1 && kLaunch * NT - 128 * CONSUMER < 128 * kProducerFloor
            ? (kLaunch * NT - 128 * kProducerFloor) / 128 / 8 * 8 : CONSUMER;
    static constexpr int kProducer = (kLaunch * NT - 128 * NC * kConsumer) / 128 / 8 * 8;
    static_assert(kProducer >= 24 && 128 * kProducer + 128 * NC * kConsumer <= kLaunch * NT,
                  "setmaxnreg within the block's launch registers");
};

// The shape every warp-specialized kernel shares: one producer warpgroup and NC = ROWS / 64
// consumer warpgroups, each owning 64 of the tile's ROWS rows (queries; keys for dK/dV), NT
// threads in all, a ring of STAGES buffers between them (StageRing) filled by the producer's
// copies (Tiles), and the register split that gives each consumer thread CONSUMER registers (a
// RegisterSplit, for specialize).
template <int DP, int ROWS, int NT, int STAGES, int CONSUMER>
struct WarpSpecialized : RegisterSplit<NT, ROWS / 64, CONSUMER> {
    static constexpr int NC = ROWS / 64;   // consumer warpgroups
    static_assert(ROWS % 64 == 0, "64 rows per consumer warpgroup");   // NT: RegisterSplit
    static_assert(STAGES >= 2 && STAGES <= 4, "2 to 4 buffers: one being read, one loading");
    static_assert(NC >= 1 && NC <= 3, "one to three consumer warpgroups (the register splits)");
    using Tiles = SwizzledTiles<DP, 128>;   // the producer warpgroup's copies (pipeline.cuh)
};

// A warp-specialized kernel's shared memory S (1024-byte aligned panels: smem_as<S, 1024>),
// its barriers set by thread 0 (S::init_barriers(args...)) before any thread reads them
template <class S, class... Args>
__device__ __forceinline__ S& ws_smem(unsigned bytes, Args... args) {
    S& sm = smem_as<S, 1024>(bytes);
    if (threadIdx.x == 0) sm.init_barriers(args...);
    __syncthreads();
    return sm;
}

// Warpgroup 0 gives registers up and produces, the others take them and consume (Split: a
// RegisterSplit, or a WarpSpecialized)
template <class Split, class Produce, class Consume>
__device__ __forceinline__ void specialize(Produce&& produce, Consume&& consume) {
    if (threadIdx.x < 128) {
        give_regs<Split::kProducer>();
        produce();
    } else {
        take_regs<Split::kConsumer>();
        consume();
    }
}

}  // namespace cuflash
