// The batched path's scores and candidate collection in one kernel (Hopper wgmma + TMA): see
// fused_collect.hpp. The kernel is compiled for sm_90a only (src/engine/cuda/sources.cmake); a
// build without it (or a device other than compute capability 9.0) reports it unsupported and
// the batched path keeps its GEMM and collect kernels.

#include "engine/cuda/kernels/fused_collect.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/launch.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::cuda_detail {
namespace {

// The tile: kBM queries × kBN shard rows, kBK values per stage: one 128-byte row of 16-bit
// values, the Tensor Memory Accelerator's 128-byte swizzle; four stages of 48 KiB. Two consumer
// warpgroups take 64 queries × 256 rows each (tiles of 128 queries), or, for batches of at most
// 64 queries, the same 64 queries × 128 rows each (tiles of 64 queries: kSplitRows), so that no
// product is wasted on absent queries. Measured and not kept (docs/PERFORMANCE.md, "The fused
// scores and collect"): stages of 32 values (eight, 64-byte swizzle), a consumer that waits for
// each stage's products before the next, pairs of blocks sharing row tiles by multicast.
constexpr int kBM = 128;
constexpr int kBN = 256;
constexpr int kBK = 64;
constexpr int kRowBytes = kBK * 2;
constexpr int kStages = 4;
constexpr int kThreads = 384;  // warpgroup 0 loads, warpgroups 1 and 2 multiply and collect
/// Registers per thread after setmaxnreg: the loading warpgroup gives up what the two consumer
/// warpgroups take (128 · 40 + 256 · 232 ≤ 384 · 168, what the launch bound leaves each thread).
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kConsumers = 256;
constexpr std::uint32_t kStageA = kBM * kBK * 2;  // 16 KiB of queries
constexpr std::uint32_t kStageB = kBN * kBK * 2;  // 32 KiB of rows
constexpr std::uint32_t kStageBytes = kStageA + kStageB;
constexpr std::size_t kSmem = kStages * kStageBytes + 1024;  // + alignment of the swizzled tiles

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SHARDTOPK_FUSED_BODY 1
#endif

#ifdef SHARDTOPK_FUSED_BODY
__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void bar_init(std::uint64_t* bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void bar_expect(std::uint64_t* bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_arrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
/// Waits until the phase of parity `parity` of the barrier has completed.
__device__ __forceinline__ void bar_wait(std::uint64_t* bar, std::uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
/// A box of the tensor map at (c0 = value, c1 = row) into shared memory, completing on `bar`.
__device__ __forceinline__ void tma_load(void* dst, const void* map, int c0, int c1, std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}
/// The wgmma descriptor of a K-major operand in 128-byte swizzled rows (8-row groups 1,024 bytes
/// apart) starting at p.
__device__ __forceinline__ std::uint64_t operand(const void* p) {
  return ((static_cast<std::uint64_t>(smem_addr(p)) & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
__device__ __forceinline__ void mma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void mma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
/// Waits until at most N of this warpgroup's committed groups of products are in flight.
template <int N>
__device__ __forceinline__ void mma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/// Keeps the compiler from moving accesses of the accumulators across the asynchronous products.
template <int R>
__device__ __forceinline__ void pin(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/// d (+)= A · Bᵀ for A [64, 16] and B [N, 16] in shared memory (K-major descriptors), N = 2 ×
/// the accumulators per thread; scale_d 0: d = A · Bᵀ. TY: the PTX type of A and B.
// The accumulators' operands: d[0 .. 63] (both shapes), then d[64 .. 127] (n256).
#define SHARDTOPK_WGMMA_D_LO \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define SHARDTOPK_WGMMA_D_HI \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define SHARDTOPK_WGMMA_R_LO "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define SHARDTOPK_WGMMA_R_HI "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
/// One wgmma of shape N (accumulator registers R_, descriptors and scale-d at %A, %B, %S).
#define SHARDTOPK_WGMMA(N, TY, R_, A, B, S, ...)                                                     \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #S ", 0;\n"                                   \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" R_ "}, %" #A ", %" #B \
               ", p, 1, 1, 0, 0;\n}\n"                                                              \
               : __VA_ARGS__                                                                          \
               : "l"(da), "l"(db), "r"(scale_d))
#define SHARDTOPK_WGMMA_N256(TY)                                                                 \
  SHARDTOPK_WGMMA(256, TY, SHARDTOPK_WGMMA_R_LO ", " SHARDTOPK_WGMMA_R_HI, 128, 129, 130, SHARDTOPK_WGMMA_D_LO, \
                  SHARDTOPK_WGMMA_D_HI)
#define SHARDTOPK_WGMMA_N128(TY) SHARDTOPK_WGMMA(128, TY, SHARDTOPK_WGMMA_R_LO, 64, 65, 66, SHARDTOPK_WGMMA_D_LO)
template <typename T, int R>
__device__ __forceinline__ void mma(float (&d)[R], std::uint64_t da, std::uint64_t db, int scale_d);
template <>
__device__ __forceinline__ void mma<__half, 128>(float (&d)[128], std::uint64_t da, std::uint64_t db, int scale_d) {
  SHARDTOPK_WGMMA_N256("f16");
}
template <>
__device__ __forceinline__ void mma<__nv_bfloat16, 128>(float (&d)[128], std::uint64_t da, std::uint64_t db,
                                                        int scale_d) {
  SHARDTOPK_WGMMA_N256("bf16");
}
template <>
__device__ __forceinline__ void mma<__half, 64>(float (&d)[64], std::uint64_t da, std::uint64_t db, int scale_d) {
  SHARDTOPK_WGMMA_N128("f16");
}
template <>
__device__ __forceinline__ void mma<__nv_bfloat16, 64>(float (&d)[64], std::uint64_t da, std::uint64_t db,
                                                       int scale_d) {
  SHARDTOPK_WGMMA_N128("bf16");
}
#undef SHARDTOPK_WGMMA_N256
#undef SHARDTOPK_WGMMA_N128
#undef SHARDTOPK_WGMMA
#undef SHARDTOPK_WGMMA_D_LO
#undef SHARDTOPK_WGMMA_D_HI
#undef SHARDTOPK_WGMMA_R_LO
#undef SHARDTOPK_WGMMA_R_HI
#endif

/// Tiles (row tile t / q_tiles, query tile t % q_tiles) of the chunk, taken by the persistent
/// grid in turn: the query tiles of one row tile run side by side and share its rows through L2.
/// Warpgroup 0: one thread issues each stage's two loads once the consumers have released it.
/// Warpgroups 1, 2: per stage four wgmma k-steps of 16 into float32 accumulators (thread: queries
/// lane / 4 and + 8 of its warp's 16, rows 8j + 2 (lane % 4) and + 1 of its warpgroup's), one
/// stage's products kept in flight while the next is issued; then the threshold test of each.
template <typename T, bool kSplitRows>
__global__ void __launch_bounds__(kThreads, 1)
    fused_collect_kernel(const __grid_constant__ CUtensorMap rows_map, const __grid_constant__ CUtensorMap query_map,
                         std::int64_t row0, int rows_c, int batch, int kblocks, bool l2,
                         const float* __restrict__ row_sq, const CandidatePools pools) {
#ifdef SHARDTOPK_FUSED_BODY
  constexpr int kQ = kSplitRows ? 64 : kBM;            // queries per tile
  constexpr int kN = kSplitRows ? kBN / 2 : kBN;       // rows per consumer warpgroup
  constexpr int kR = kN / 2;                           // accumulators per thread
  constexpr std::uint32_t kLoad = kQ * kBK * 2 + kStageB;  // bytes per stage
  extern __shared__ unsigned char smem_raw[];
  __shared__ alignas(8) std::uint64_t full[kStages], empty[kStages];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) &
                                                         ~static_cast<std::uintptr_t>(1023));
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      bar_init(&full[s], 1);
      bar_init(&empty[s], kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int q_tiles = (batch + kQ - 1) / kQ;
  const int tiles = (rows_c + kBN - 1) / kBN * q_tiles;
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kProducerRegs));
    if (threadIdx.x != 0) return;
    int s = 0;
    std::uint32_t phase = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      const int qt = t % q_tiles;
      const int r = static_cast<int>(row0) + (t / q_tiles) * kBN;
      for (int kb = 0; kb < kblocks; ++kb) {
        bar_wait(&empty[s], phase ^ 1u);
        unsigned char* stage = smem + s * kStageBytes;
        bar_expect(&full[s], kLoad);
        tma_load(stage, &query_map, kb * kBK, qt * kQ, &full[s]);
        tma_load(stage + kStageA, &rows_map, kb * kBK, r, &full[s]);
        if (++s == kStages) {
          s = 0;
          phase ^= 1u;
        }
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kConsumerRegs));
  const int c = wg - 1;  // this consumer
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  float d[kR];
  int s = 0;
  std::uint32_t phase = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int qt = t % q_tiles;
    const int rt = t / q_tiles;
    int prev = -1;  // the stage whose products are in flight
    for (int kb = 0; kb < kblocks; ++kb) {
      bar_wait(&full[s], phase);
      const unsigned char* a = smem + s * kStageBytes + (kSplitRows ? 0 : c * 64 * kRowBytes);
      const unsigned char* b = smem + s * kStageBytes + kStageA + (kSplitRows ? c * kN * kRowBytes : 0);
      pin(d);
      mma_fence();
#pragma unroll
      for (int k = 0; k < kBK / 16; ++k) mma<T, kR>(d, operand(a + 32 * k), operand(b + 32 * k), kb > 0 || k > 0);
      mma_commit();
      if (prev >= 0) {  // the previous stage's products are done: its buffers go back to the loads
        mma_wait<1>();
        bar_arrive(&empty[prev]);
      }
      prev = s;
      if (++s == kStages) {
        s = 0;
        phase ^= 1u;
      }
    }
    mma_wait<0>();
    pin(d);
    bar_arrive(&empty[prev]);
    // The epilogue: this thread's two queries and kN / 4 rows of the tile.
    const int qa = qt * kQ + (kSplitRows ? 0 : c * 64) + warp * 16 + lane / 4;
    const int qb = qa + 8;
    // A query past the batch compares as NaN: no product reaches it, +inf included (the query
    // buffer's rows past the batch hold whatever an earlier batch left there).
    const float none = __int_as_float(0x7fc00000);
    const float ta = qa < batch ? pools.thr[qa] : none, tb = qb < batch ? pools.thr[qb] : none;
    const QueryInfo ia = pools.qinfo[qa < batch ? qa : 0], ib = pools.qinfo[qb < batch ? qb : 0];
    const int i0 = rt * kBN + (kSplitRows ? c * kN : 0) + 2 * (lane % 4);  // chunk index of column 0
    // Most tiles hold no row that reaches either threshold: the largest product of each query
    // bounds its scores (the score is non-decreasing in the product; for l2, ‖x‖² ≥ 0 only lowers
    // it), so one comparison each skips the tile's tests. The same bound per group of kGroup
    // rows, and per query, then skips the groups and the query that no row of them reaches (a
    // warp runs a group's tests when one of its lanes needs them). Against the tile's bound
    // alone, 10M × 768 float16 rows, B = 256, device p50: k = 8 9.0 → 7.1 ms, k = 100 9.1 → 7.5,
    // k = 1,024 9.8 → 9.5 (one H100; docs/PERFORMANCE.md, "The fused epilogue by groups").
    constexpr int kGroup = 8;                 // rows per group: 4 steps of j
    constexpr int kGroups = kN / 4 / kGroup;  // groups of this thread's kN / 4 rows
    float ga[kGroups], gb[kGroups];
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      ga[g] = fmaxf(d[16 * g], d[16 * g + 1]);
      gb[g] = fmaxf(d[16 * g + 2], d[16 * g + 3]);
#pragma unroll
      for (int j = 4 * g + 1; j < 4 * g + 4; ++j) {
        ga[g] = fmaxf(ga[g], fmaxf(d[4 * j], d[4 * j + 1]));
        gb[g] = fmaxf(gb[g], fmaxf(d[4 * j + 2], d[4 * j + 3]));
      }
    }
    float ma = ga[0], mb = gb[0];
#pragma unroll
    for (int g = 1; g < kGroups; ++g) {
      ma = fmaxf(ma, ga[g]);
      mb = fmaxf(mb, gb[g]);
    }
    const bool pass_a = ia.approx(ma, l2, 0.0f) >= ta, pass_b = ib.approx(mb, l2, 0.0f) >= tb;
    if (!pass_a && !pass_b) continue;
    // The groups whose bound reaches their query's threshold: bit g for query qa, kGroups + g
    // for qb. Each is tested by one block of code shared by all of them (its 8 values moved into
    // v first): 28 KB of machine code for 128-query tiles instead of 137 KB with a copy of the
    // tests per group and query. Against those copies, 10M × 768 float16 rows, B = 256, device
    // p50: k = 8 7.18 → 7.00 ms, k = 100 7.49–7.52 → 7.20–7.39, k = 1,024 9.58–9.81 → 8.46–8.52
    // (one H100; docs/PERFORMANCE.md, "Where the fused kernel's time goes").
    std::uint32_t mask = 0;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      if (pass_a && ia.approx(ga[g], l2, 0.0f) >= ta) mask |= 1u << g;
      if (pass_b && ib.approx(gb[g], l2, 0.0f) >= tb) mask |= 1u << (kGroups + g);
    }
    while (mask != 0) {
      const int bit = __ffs(mask) - 1;
      mask &= mask - 1;
      float v[8];
#pragma unroll
      for (int m = 0; m < 2 * kGroups; ++m) {
        if (bit == m) {
          const int e0 = m < kGroups ? 0 : 2, g = m % kGroups;
#pragma unroll
          for (int u = 0; u < 8; ++u) v[u] = d[16 * g + 4 * (u / 2) + e0 + u % 2];
        }
      }
      const bool hb = bit >= kGroups;
      const QueryInfo qi = hb ? ib : ia;
      const float t = hb ? tb : ta;
      const int qq = hb ? qb : qa;
      const int ig = i0 + 32 * (bit % kGroups);  // chunk index of the group's first value
      std::uint32_t pass = 0;
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int i = ig + 8 * (u / 2) + u % 2;
        if (i >= rows_c) continue;
        v[u] = qi.approx(v[u], l2, l2 ? row_sq[row0 + i] : 0.0f);
        if (v[u] >= t) pass |= 1u << u;
      }
      // The appends, as collect_kernel's (a slot of the query's pool each, the overflow flag
      // past its capacity), with one atomic per query for the lanes appending to it together:
      // the lanes of a quad share qa (and qb) and no other lane does, so a lane's peers are the
      // active lanes of its quad testing the same one of the two. Against an atomic per entry,
      // 10M × 768 float16 rows, B = 256, device p50: k = 1,024 8.37–8.42 → 8.14–8.17 ms, k = 100
      // 7.29–7.36 → 7.31–7.48 (no change); 1M rows, B = 64, k = 100 652 → 617–621 µs (one H100;
      // docs/PERFORMANCE.md, "Where the fused kernel's time goes").
      const unsigned active = __activemask();
      const int n = __popc(pass);
      const int quad = lane & ~3;
      int before = 0, total = 0, leader = -1;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int nj = __shfl_sync(active, 2 * n + (hb ? 1 : 0), quad + j);
        if (((active >> (quad + j)) & 1u) && (nj & 1) == (hb ? 1 : 0)) {
          if (leader < 0) leader = quad + j;
          total += nj >> 1;
          if (quad + j < lane) before += nj >> 1;
        }
      }
      std::uint32_t at = 0;
      if (lane == leader && total > 0) at = atomicAdd(&pools.count[qq], static_cast<std::uint32_t>(total));
      at = __shfl_sync(active, at, leader) + static_cast<std::uint32_t>(before);
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        if (!((pass >> u) & 1u)) continue;
        const int i = ig + 8 * (u / 2) + u % 2;
        if (at < static_cast<std::uint64_t>(pools.cap))
          pools.pool[static_cast<std::int64_t>(qq) * pools.cap + at] = PoolEntry{v[u], static_cast<std::int32_t>(row0 + i)};
        else
          atomicOr(&pools.overflow[qq], 1u);
        ++at;
      }
    }
  }
#else
  __trap();
#endif
}

#ifdef SHARDTOPK_FUSED_SM90A
constexpr bool kBuilt = true;
#else
constexpr bool kBuilt = false;
#endif

/// Tiles of queries for a batch: of 64 queries for batches of at most 64 (the kernel's
/// kSplitRows), else of kBM.
std::int64_t query_tiles(int batch) { return batch <= 64 ? 1 : (static_cast<std::int64_t>(batch) + kBM - 1) / kBM; }

/// cuTensorMapEncodeTiled from the driver (no link against libcuda).
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static std::once_flag once;
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  });
  return fn;
}

/// A 2-D map of [outer, dpad] 16-bit values with boxes of [box_rows, kBK], 128-byte swizzle.
void make_map(void* map, Dtype dtype, const void* base, std::int64_t outer, std::int64_t dpad, int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 fn = encode_tiled();
  SHARDTOPK_EXPECTS(fn != nullptr, "FusedCollect: the driver has no cuTensorMapEncodeTiled");
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(dpad), static_cast<cuuint64_t>(outer)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(dpad) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kBK), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t step[2] = {1, 1};
  const CUresult r = fn(static_cast<CUtensorMap*>(map),
                        dtype == Dtype::kFloat16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                        const_cast<void*>(base), dims, strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  SHARDTOPK_EXPECTS(r == CUDA_SUCCESS, "FusedCollect: cuTensorMapEncodeTiled failed (CUresult ", static_cast<int>(r),
                    ") for [", outer, ", ", dpad, "] at ", base);
}

}  // namespace

bool fused_collect_supported(Dtype dtype, std::int64_t dpad) {
  if (!kBuilt || (dtype != Dtype::kFloat16 && dtype != Dtype::kBFloat16) || dpad < 8 || dpad % 8 != 0) return false;
  int device = 0, major = 0, minor = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CHECK_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9 || minor != 0 || encode_tiled() == nullptr) return false;
  // The consumers' setmaxnreg raise completes only if the block was given the registers at
  // launch (a build capping registers per thread lower would hang there).
  for (const void* fn : {reinterpret_cast<const void*>(&fused_collect_kernel<__half, false>),
                         reinterpret_cast<const void*>(&fused_collect_kernel<__half, true>),
                         reinterpret_cast<const void*>(&fused_collect_kernel<__nv_bfloat16, false>),
                         reinterpret_cast<const void*>(&fused_collect_kernel<__nv_bfloat16, true>)}) {
    cudaFuncAttributes attr{};
    CHECK_CUDA(cudaFuncGetAttributes(&attr, fn));
    if (attr.numRegs * kThreads < 128 * kProducerRegs + 256 * kConsumerRegs) return false;
  }
  return true;
}

FusedCollect::FusedCollect(Dtype dtype, const void* shard, std::int64_t rows, std::int64_t dpad, const void* queries,
                           int batch_max)
    : rows_(rows), dpad_(dpad), batch_max_(batch_max), dtype_(dtype) {
  SHARDTOPK_EXPECTS(fused_collect_supported(dtype, dpad), "FusedCollect: not supported for ", to_string(dtype),
                    " rows of ", dpad, " padded values on this device and build");
  SHARDTOPK_EXPECTS(rows >= 1 && rows < (1LL << 31) - kBN, "FusedCollect: rows must be in [1, 2^31 - 256) (got ", rows,
                    ")");
  SHARDTOPK_EXPECTS(batch_max >= 1, "FusedCollect: batch_max must be >= 1 (got ", batch_max, ")");
  SHARDTOPK_EXPECTS(shard != nullptr && queries != nullptr && reinterpret_cast<std::uintptr_t>(shard) % 16 == 0 &&
                        reinterpret_cast<std::uintptr_t>(queries) % 16 == 0,
                    "FusedCollect: shard and queries must be 16-byte aligned device pointers");
  make_map(rows_map_.bytes, dtype, shard, rows, dpad, kBN);
  make_map(query_map_.bytes, dtype, queries, batch_max, dpad, kBM);
  make_map(query_map64_.bytes, dtype, queries, batch_max, dpad, 64);
  int device = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device));
  allow_dynamic_smem(reinterpret_cast<const void*>(&fused_collect_kernel<__half, false>), kSmem);
  allow_dynamic_smem(reinterpret_cast<const void*>(&fused_collect_kernel<__half, true>), kSmem);
  allow_dynamic_smem(reinterpret_cast<const void*>(&fused_collect_kernel<__nv_bfloat16, false>), kSmem);
  allow_dynamic_smem(reinterpret_cast<const void*>(&fused_collect_kernel<__nv_bfloat16, true>), kSmem);
}

std::int64_t FusedCollect::max_chunk_rows(int batch) {
  return (std::int64_t{1} << 30) / query_tiles(batch) * kBN;
}

void FusedCollect::enqueue(std::int64_t row0, int rows_c, int batch, bool l2, const float* row_sq,
                           const CandidatePools& pools, cudaStream_t stream) const {
  SHARDTOPK_EXPECTS(row0 >= 0 && rows_c >= 1 && row0 + rows_c <= rows_, "FusedCollect: rows [", row0, ", ",
                    row0 + rows_c, ") outside the shard's ", rows_);
  SHARDTOPK_EXPECTS(batch >= 1 && batch <= batch_max_, "FusedCollect: batch must be in [1, ", batch_max_, "] (got ",
                    batch, ")");
  SHARDTOPK_EXPECTS(!l2 || row_sq != nullptr, "FusedCollect: l2 needs the rows' norms");
  const bool split = batch <= 64;  // tiles of 64 queries
  const std::int64_t tiles = (static_cast<std::int64_t>(rows_c) + kBN - 1) / kBN * query_tiles(batch);
  const int grid = static_cast<int>(std::min<std::int64_t>(tiles, sms_));
  SHARDTOPK_EXPECTS(tiles + grid <= INT_MAX, "FusedCollect: ", tiles, " tiles of ", rows_c, " rows × ", batch,
                    " queries exceed the kernel's int tile index");
  const int kblocks = static_cast<int>((dpad_ + kBK - 1) / kBK);
  CUtensorMap rm, qm;
  static_assert(sizeof(CUtensorMap) == sizeof(TensorMap), "a tensor map is 128 bytes");
  memcpy(&rm, rows_map_.bytes, sizeof(rm));
  memcpy(&qm, split ? query_map64_.bytes : query_map_.bytes, sizeof(qm));
  const bool half = dtype_ == Dtype::kFloat16;
  const auto kernel = half ? (split ? fused_collect_kernel<__half, true> : fused_collect_kernel<__half, false>)
                           : (split ? fused_collect_kernel<__nv_bfloat16, true> : fused_collect_kernel<__nv_bfloat16, false>);
  kernel<<<grid, kThreads, kSmem, stream>>>(rm, qm, row0, rows_c, batch, kblocks, l2, row_sq, pools);
  CHECK_CUDA(cudaGetLastError());
}

}  // namespace shardtopk::cuda_detail
