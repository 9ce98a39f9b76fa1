// Tensor-core scores of gathered shard rows (mma.sync m16n8k16, float32 accumulation).
//
// A block of 4 warps scores 128 gathered rows against a group of 32 queries; each warp owns 32
// rows (two m16 tiles) × the group's 32 queries (four n8 tiles): 32 float accumulators per
// thread. The group's queries are staged in shared memory once (2 KiB per 32 k-values), then
// every warp streams its rows on its own: no barrier after the staging, so one warp's loads
// overlap the others' mma instructions.
//
// Operand order: a dot product does not depend on the order of its k-values as long as both
// operands use the same one, so within each block of 32 k-values lane (g = lane / 4,
// t = lane % 4) loads the 8 consecutive values [8t, 8t + 8) of each of its rows (and of query g
// of each n8 tile) with one 16-byte load, and mma step s ∈ {0, 1} takes values 4s .. 4s + 3 of
// them: the fragment slot of logical k = 2t + j (j < 2) holds value 4s + j, the slot of
// k = 2t + 8 + j holds value 4s + 2 + j, on the A side (rows g and g + 8) and the B side
// (query g) alike. Every product therefore pairs the same element of a row and a query.
//
// Rows come straight from global memory into registers, two blocks of 32 k-values (8 loads of
// 16 bytes per thread) at a time, the next pair loaded while the current one is multiplied.
// Shared memory holds the queries in the order the B fragments read them (per block of 32
// k-values: query-major, 4 × 16 bytes per query), so that the 8 lanes of each 16-byte access
// phase read 128 consecutive bytes: no bank conflicts, no padding. Tuned for the memory-bound
// use: a few dozen queries (one or two groups), thousands of random rows of D = 768.

#include "engine/cuda/kernels/gathered_scores.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/launch.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::cuda_detail {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kWarpRows = 32;                       // two m16 tiles per warp
constexpr int kBlockRows = kWarps * kWarpRows;      // 128 gathered rows per block
constexpr int kGroup = kGatheredQueryGroup;         // queries per block: four n8 tiles
constexpr std::size_t kStageBytes = kGroup * 4 * 16;  // the group's queries per 32 k-values: 2 KiB
static_assert(kGroup == 32, "a warp scores four n8 tiles of queries");

/// D += A · B for one m16n8k16 tile: float32 accumulators, 16-bit operands of type T.
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], std::uint32_t a0, std::uint32_t a1, std::uint32_t a2,
                                         std::uint32_t a3, std::uint32_t b0, std::uint32_t b1) {
  if constexpr (std::is_same<T, __half>::value) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

/// 16 bytes at p when `ok`, else zeros (the dimension's tail beyond dpad).
__device__ __forceinline__ uint4 load16(const uint4* p, bool ok) {
  return ok ? __ldg(p) : make_uint4(0u, 0u, 0u, 0u);
}

__device__ __forceinline__ void store_out(__half* out, std::int64_t at, float v) { out[at] = __float2half_rn(v); }
__device__ __forceinline__ void store_out(float* out, std::int64_t at, float v) { out[at] = v; }

/// S[q · ld + i] = Σ_d queries[q, d] · shard[rows[i], d] for the block's 128 gathered rows and
/// its group of 32 queries (block x: group x % groups of rows block x / groups). T: __half or
/// __nv_bfloat16; OutT: __half or float. Dynamic shared memory: kStageBytes per 32 k-values.
template <typename T, typename OutT>
__global__ void __launch_bounds__(kThreads)
    gathered_scores_kernel(const uint4* __restrict__ shard, int nvec, const std::int32_t* __restrict__ rows,
                           int count, const uint4* __restrict__ queries, int n, int groups,
                           OutT* __restrict__ out, std::int64_t ld) {
  extern __shared__ uint4 sq[];  // [k-blocks][32 queries][4]
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  // The groups of one block of rows are neighbours in the grid: the rows' second and later
  // reads (n > 32) come from L2.
  const int q0 = static_cast<int>(blockIdx.x % static_cast<unsigned>(groups)) * kGroup;
  const int i0 = static_cast<int>(blockIdx.x / static_cast<unsigned>(groups)) * kBlockRows + warp * kWarpRows;
  const int nkb = (nvec + 3) / 4;  // blocks of 32 k-values

  // This lane's four rows: tile mt, row g (h = 0) or g + 8 (h = 1). A row past count is read as
  // the last gathered row (valid memory) and its scores are not stored.
  const uint4* rp[2][2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = min(i0 + mt * 16 + h * 8 + g, count - 1);
      rp[mt][h] = shard + static_cast<std::int64_t>(__ldg(rows + i)) * nvec;
    }
  // Rows of k-blocks kb and kb + 1 (zeros beyond the dimension).
  const auto load_pair = [&](uint4 (&r)[2][2][2], int kb) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int chunk = (kb + j) * 4 + t;
      const bool ok = chunk < nvec;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) r[j][mt][h] = load16(rp[mt][h] + (ok ? chunk : 0), ok);
    }
  };
  uint4 ra[2][2][2], rb[2][2][2];
  load_pair(ra, 0);

  // The group's queries, every k-block: vector e = (kb · 32 + q) · 4 + t holds values
  // [8t, 8t + 8) of k-block kb of query q0 + q (zeros beyond n or the dimension).
  for (int e = static_cast<int>(threadIdx.x); e < nkb * kGroup * 4; e += kThreads) {
    const int q = q0 + ((e >> 2) & (kGroup - 1));
    const int chunk = (e >> 7) * 4 + (e & 3);
    const bool ok = q < n && chunk < nvec;
    sq[e] = load16(queries + (ok ? static_cast<std::int64_t>(q) * nvec + chunk : 0), ok);
  }
  __syncthreads();

  float acc[2][4][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mt][nt][c] = 0.0f;

  // acc += the rows' k-blocks kb, kb + 1 (held in r) × the queries'.
  const auto multiply = [&](const uint4 (&r)[2][2][2], int kb) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      if (kb + j >= nkb) break;  // warp-uniform
      uint4 b[4];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) b[nt] = sq[((kb + j) * kGroup + nt * 8 + g) * 4 + t];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          const uint4& r0 = r[j][mt][0];  // row g
          const uint4& r1 = r[j][mt][1];  // row g + 8
          // step 0: values 0,1 → k 2t,2t+1; values 2,3 → k 2t+8,2t+9
          mma16816<T>(acc[mt][nt], r0.x, r1.x, r0.y, r1.y, b[nt].x, b[nt].y);
          // step 1: values 4,5 → k 2t,2t+1; values 6,7 → k 2t+8,2t+9
          mma16816<T>(acc[mt][nt], r0.z, r1.z, r0.w, r1.w, b[nt].z, b[nt].w);
        }
    }
  };
  // Two pairs of k-blocks in flight: the next pair's loads are issued before the current pair's
  // mma instructions.
  for (int kb = 0; kb < nkb; kb += 4) {
    if (kb + 2 < nkb) load_pair(rb, kb + 2);
    multiply(ra, kb);
    if (kb + 2 >= nkb) break;
    if (kb + 4 < nkb) load_pair(ra, kb + 4);
    multiply(rb, kb + 2);
  }

  // D fragment: c0, c1 = (row g, queries 2t, 2t + 1), c2, c3 = (row g + 8, the same queries).
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int i = i0 + mt * 16 + (c >> 1) * 8 + g;
        const int q = q0 + nt * 8 + 2 * t + (c & 1);
        if (i < count && q < n) store_out(out, static_cast<std::int64_t>(q) * ld + i, acc[mt][nt][c]);
      }
}

/// Dynamic shared memory of a launch over rows of nvec 16-byte vectors.
std::size_t smem_bytes(int nvec) { return static_cast<std::size_t>((nvec + 3) / 4) * kStageBytes; }

template <typename T, typename OutT>
void launch(const GatheredScores& a, cudaStream_t stream) {
  const int nvec = static_cast<int>(a.dpad / 8);
  allow_dynamic_smem(reinterpret_cast<const void*>(gathered_scores_kernel<T, OutT>), smem_bytes(nvec));
  const int groups = (a.n + kGroup - 1) / kGroup;
  const std::int64_t blocks = static_cast<std::int64_t>((a.count + kBlockRows - 1) / kBlockRows) * groups;
  SHARDTOPK_EXPECTS(blocks <= INT_MAX, "gathered_scores: ", a.count, " rows × ", a.n, " queries take ", blocks,
                    " thread blocks, more than 2^31 - 1");
  gathered_scores_kernel<T, OutT><<<static_cast<unsigned>(blocks), kThreads, smem_bytes(nvec), stream>>>(
      static_cast<const uint4*>(a.shard), nvec, a.rows, a.count, static_cast<const uint4*>(a.queries), a.n, groups,
      static_cast<OutT*>(a.out), a.ld);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gathered_scores_supported(Dtype dtype) { return dtype == Dtype::kFloat16 || dtype == Dtype::kBFloat16; }

bool gathered_scores_supported(Dtype dtype, std::int64_t dpad) {
  return gathered_scores_supported(dtype) && dpad >= 8 && dpad % 8 == 0 && dpad <= kGatheredMaxDpad;
}

void gathered_scores(Dtype dtype, const GatheredScores& a, cudaStream_t stream) {
  SHARDTOPK_EXPECTS(gathered_scores_supported(dtype), "gathered_scores: dtype must be float16 or bfloat16 (got ",
                    to_string(dtype), ")");
  SHARDTOPK_EXPECTS(gathered_scores_supported(dtype, a.dpad),
                    "gathered_scores: dpad must be a positive multiple of 8 up to ", kGatheredMaxDpad, " (got ", a.dpad,
                    ")");
  SHARDTOPK_EXPECTS(a.count >= 1 && a.count <= INT_MAX - kBlockRows, "gathered_scores: count must be in 1 .. ",
                    INT_MAX - kBlockRows, " (got ", a.count, ")");
  SHARDTOPK_EXPECTS(a.n >= 1, "gathered_scores: n must be >= 1 (got ", a.n, ")");
  SHARDTOPK_EXPECTS(a.ld >= a.count, "gathered_scores: ld must be >= count = ", a.count, " (got ", a.ld, ")");
  SHARDTOPK_EXPECTS(a.shard != nullptr && a.rows != nullptr && a.queries != nullptr && a.out != nullptr,
                    "gathered_scores: null pointer (shard ", a.shard, ", rows ", a.rows, ", queries ", a.queries,
                    ", out ", a.out, ")");
  SHARDTOPK_EXPECTS(aligned16(a.shard) && aligned16(a.queries), "gathered_scores: shard (", a.shard,
                    ") and queries (", a.queries, ") must be 16-byte aligned");
  if (dtype == Dtype::kFloat16) {
    launch<__half, __half>(a, stream);
  } else {
    launch<__nv_bfloat16, float>(a, stream);
  }
  CHECK_CUDA_LAUNCH();
}

}  // namespace shardtopk::cuda_detail
