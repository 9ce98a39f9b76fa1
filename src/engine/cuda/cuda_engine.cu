// CUDA engine: a resident shard on one GPU, scored and reduced to a local top-k on the device.
//
// Memory (DESIGN.md invariant 5). Everything lives in ONE device allocation (the "arena") made
// by the constructor and laid out by make_plan(), which cuda_engine_device_bytes() also calls,
// so `shardtopk plan` predicts resident_bytes() exactly. A search allocates nothing.
//
//   shard    [rows, dpad]            storage dtype, rows zero-padded to dpad (16-byte chunks)
//   ids      [rows]                  int64 global ids
//   row_sq   [rows]                  float ‖x‖² (l2 only; the batched path's approximate score)
//   queries  [batch_max, dim]        float32 (query_buffer())
//   qpad     [batch_max, dpad]       float32 zero-padded queries (exact arithmetic)
//   qhat     [batch_max, dpad]       storage dtype, scaled queries for the tensor-core GEMM
//   qinfo    [batch_max]             per-query Δ, scale, ‖q‖²
//   local / gathered / merged        Candidate buffers of the index's data path
//   hists, counters, thresholds      selection state
//   pool     [batch_max, pool_cap]   (score, row) candidates per query
//   scores   [max(rows, chunk)]      batch-1 exact scores / batched GEMM output [B, R] / upload staging
//   cublas   32 MiB                  cuBLAS workspace (no allocation inside cuBLAS calls)
//
// Scoring (DESIGN.md invariant 3): score.cuh, one arithmetic for every batch size. Selection:
// topk_kernels.cuh (batch 1: one scan + radix select; batch ≥ 2: tensor-core GEMM per chunk of
// rows, filter within a proven bound of the running k-th, exact re-scoring; docs/EXACTNESS.md).

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <list>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cuda_check.cuh"
#include "engine/cuda/score.cuh"
#include "engine/cuda/topk_kernels.cuh"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/generator.hpp"
#include "shardtopk/ordering.hpp"

#define CHECK_CUBLAS(call)                                                                                   \
  do {                                                                                                       \
    const cublasStatus_t shardtopk_cublas_st_ = (call);                                                      \
    if (shardtopk_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                                       \
      throw ::shardtopk::Error(::shardtopk::detail::concat("cuBLAS call ", #call, " failed: ",               \
                                                           cublasGetStatusString(shardtopk_cublas_st_),     \
                                                           " at ", __FILE__, ":", __LINE__));                \
  } while (0)

namespace shardtopk {
namespace {

using cuda_detail::Batch1State;
using cuda_detail::DeviceGuard;
using cuda_detail::PoolEntry;
using cuda_detail::QueryInfo;

// ---------------------------------------------------------------- tuning constants

constexpr int kPrepThreads = 256;
constexpr int kMergeThreads = 256;
constexpr int kMergeElemsPerBlock = 2048;
constexpr std::uint64_t kAlign = 256;
constexpr unsigned long long kStatusOk = ~0ull;
constexpr int kStatusScanDir = 3;                   // status_ word holding the batch-1 scan direction
constexpr std::uint64_t kScanL2KeepBytes = 32ull << 20;  // the rows a batch-1 scan leaves in L2 (of 50 MB;
                                                        // 16 and 44 MiB measured no better: bench/NOTES.md)
constexpr std::uint64_t kChunkBudget = 24ull << 20;   // batched GEMM output per chunk (×2 buffers): L2-resident;
                                                      // 6/12/48 MB measured slower (bench/NOTES.md)
constexpr std::uint64_t kCublasWorkspace = 32ull << 20;
constexpr std::uint64_t kMinScratch = 4ull << 20;     // upload staging at least
constexpr int kMaxCandCap = 16384;                   // final sort in shared memory: 16384 × 12 B
constexpr std::uint32_t kPoolTriggerDiv = 4;          // compact a pool above min(cap / 4, max(2k, 256))
constexpr std::int64_t kFirstChunkRows = 8192;        // batched: rows that seed the thresholds
constexpr std::int64_t kCompactEvery = 4;             // batched: chunks between pool compactions
constexpr std::int64_t kMaxChunkGrowth = 8;           // batched: chunk c ≤ 8 × the rows before it
constexpr std::int64_t kScanBlockRows = 1024;         // batch 1, large shards: rows per scan block
constexpr std::int64_t kScanBlockedWaves = 8;         // ... from 8 waves of such blocks on

static_assert(sizeof(Candidate) == 16, "Candidate layout is shared by host and device");

// ---------------------------------------------------------------- planning (host only)

std::uint64_t round_up_u(std::uint64_t x, std::uint64_t m) { return (x + m - 1) / m * m; }

/// Multiplies sizes, refusing results that cannot be a real allocation (avoids silent wrap).
std::uint64_t mul_bytes(std::uint64_t a, std::uint64_t b) {
  if (a != 0 && b > (std::uint64_t{1} << 62) / a)
    throw Error(detail::concat("CUDA engine: buffer size ", a, " x ", b, " bytes overflows"));
  return a * b;
}

int next_pow2(std::int64_t x) {
  int p = 1;
  while (p < x && p < (1 << 30)) p <<= 1;
  return p;
}

std::uint64_t storage_bytes(Dtype d) { return d == Dtype::kFloat32 ? 4 : 2; }

/// Elements per 16-byte chunk, and the padded row length.
std::int64_t vec_elems(Dtype d) { return 16 / static_cast<std::int64_t>(storage_bytes(d)); }
std::int64_t padded_dim(std::int64_t dim, Dtype d) { return (dim + vec_elems(d) - 1) / vec_elems(d) * vec_elems(d); }

/// Candidates the final sort holds: 2 × k_max at least (ties and the filter's margin), at most
/// kMaxCandCap (shared memory).
int cand_cap(const EngineLimits& lim) { return std::max(4096, next_pow2(2LL * lim.k_max)); }
std::int64_t pool_cap(const EngineLimits& lim) { return 4LL * cand_cap(lim); }

struct Plan {
  std::int64_t dpad = 0;
  std::uint64_t off_shard = 0, off_ids = 0, off_row_sq = 0, off_queries = 0, off_qpad = 0, off_qhat = 0,
                off_qinfo = 0, off_local = 0, off_gathered = 0, off_merged = 0, off_status = 0, off_hists = 0,
                off_counts = 0, off_overflow = 0, off_thr = 0, off_state = 0,
                off_pool = 0, off_scores = 0, off_cublas = 0;
  std::uint64_t scores_bytes = 0;
  std::uint64_t sbuf_bytes = 0;   // one batched GEMM output buffer (two, ping-pong)
  std::uint64_t shard_bytes = 0;  // shard + ids + row norms
  std::uint64_t total = 0;        // the arena
};

void check_shape(std::int64_t rows, std::int64_t dim, const EngineLimits& lim) {
  SHARDTOPK_EXPECTS(rows >= 0, "CUDA engine: shard rows must be >= 0 (got ", rows, ")");
  SHARDTOPK_EXPECTS(rows <= std::numeric_limits<std::int32_t>::max(), "CUDA engine: a shard holds at most ",
                    std::numeric_limits<std::int32_t>::max(), " rows (got ", rows, "); add ranks");
  SHARDTOPK_EXPECTS(dim >= 1, "CUDA engine: dimension must be >= 1 (got ", dim, ")");
  SHARDTOPK_EXPECTS(dim <= (1 << 20), "CUDA engine: dimension must be <= ", (1 << 20), " (got ", dim, ")");
  SHARDTOPK_EXPECTS(lim.batch_max >= 1, "CUDA engine: batch_max must be >= 1 (got ", lim.batch_max, ")");
  SHARDTOPK_EXPECTS(lim.batch_max <= 65535, "CUDA engine: batch_max must be <= 65535 (got ", lim.batch_max, ")");
  SHARDTOPK_EXPECTS(lim.k_max >= 1, "CUDA engine: k_max must be >= 1 (got ", lim.k_max, ")");
  SHARDTOPK_EXPECTS(cand_cap(lim) <= kMaxCandCap, "CUDA engine: search.k_max=", lim.k_max, " is above its limit of ",
                    kMaxCandCap / 2, " (the final sort keeps 2 x k_max candidates in shared memory)");
  SHARDTOPK_EXPECTS(lim.world_size >= 1, "CUDA engine: world_size must be >= 1 (got ", lim.world_size, ")");
}

/// The arena layout for a shard; the constructor allocates exactly `total` bytes.
Plan make_plan(std::int64_t rows, std::int64_t dim, Dtype dtype, const EngineLimits& lim) {
  check_shape(rows, dim, lim);
  const std::uint64_t bmax = static_cast<std::uint64_t>(lim.batch_max);
  const std::uint64_t kmax = static_cast<std::uint64_t>(lim.k_max);
  const std::uint64_t cand = sizeof(Candidate);
  const std::uint64_t urows = static_cast<std::uint64_t>(rows);
  Plan p;
  p.dpad = padded_dim(dim, dtype);
  const std::uint64_t dpad = static_cast<std::uint64_t>(p.dpad);
  std::uint64_t off = 0;
  auto take = [&off](std::uint64_t bytes) {
    const std::uint64_t at = off;
    off = round_up_u(off + bytes, kAlign);
    return at;
  };
  const std::uint64_t bk = mul_bytes(mul_bytes(bmax, kmax), cand);
  p.off_shard = take(mul_bytes(mul_bytes(urows, dpad), storage_bytes(dtype)));
  p.off_ids = take(mul_bytes(urows, 8));
  p.off_row_sq = take(mul_bytes(urows, 4));  // used by l2; kept for every metric so plans match
  p.shard_bytes = off;
  p.off_queries = take(mul_bytes(mul_bytes(bmax, static_cast<std::uint64_t>(dim)), 4));
  p.off_qpad = take(mul_bytes(mul_bytes(bmax, dpad), 4));
  p.off_qhat = take(mul_bytes(mul_bytes(bmax, dpad), storage_bytes(dtype)));
  p.off_qinfo = take(mul_bytes(bmax, sizeof(QueryInfo)));
  p.off_local = take(bk);
  p.off_gathered = take(mul_bytes(bk, static_cast<std::uint64_t>(lim.world_size)));
  p.off_merged = take(bk);
  p.off_status = take(4 * sizeof(unsigned long long));  // [kStatusScanDir]: the batch-1 scan's direction
  p.off_hists = take(cuda_detail::kHistWords * 4);
  p.off_counts = take(mul_bytes(bmax, 4));
  p.off_overflow = take(mul_bytes(bmax, 4));
  p.off_thr = take(mul_bytes(bmax, 4));
  p.off_state = take(sizeof(Batch1State));
  p.off_pool = take(mul_bytes(mul_bytes(bmax, static_cast<std::uint64_t>(pool_cap(lim))), sizeof(PoolEntry)));
  p.sbuf_bytes = round_up_u(std::min<std::uint64_t>(kChunkBudget, mul_bytes(mul_bytes(bmax, urows), 4)), kAlign);
  p.scores_bytes = std::max<std::uint64_t>({mul_bytes(urows, 4), 2 * p.sbuf_bytes, kMinScratch,
                                            mul_bytes(static_cast<std::uint64_t>(dim), 4)});
  p.off_scores = take(p.scores_bytes);
  p.off_cublas = take(rows > 0 ? kCublasWorkspace : 0);
  p.total = off;
  return p;
}

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::kFloat32: return "float32";
    case Dtype::kFloat16: return "float16";
    case Dtype::kBFloat16: return "bfloat16";
  }
  return "?";
}

// ---------------------------------------------------------------- device helpers
// ---------------------------------------------------------------- device helpers

__device__ __forceinline__ float to_float(float x) { return x; }

/// Fills out [n] with pad_candidate(). Grid-stride.
__global__ void fill_pad_kernel(Candidate* __restrict__ out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = pad_candidate();
}

/// Status key of a rejected query: the smallest key wins (atomicMin), i.e. the first query, and
/// within it the first column. reason 0: non-finite value at `col`; 1: zero norm.
__device__ __forceinline__ unsigned long long query_status(std::int64_t query, std::int64_t col, int reason) {
  return (static_cast<unsigned long long>(query) << 40) | (static_cast<unsigned long long>(col) << 1) |
         static_cast<unsigned long long>(reason);
}

/// Validates (all metrics) and, for cosine, L2-normalises queries [batch, dim] in place.
/// Block per query (grid = batch), kPrepThreads threads. The norm is the arithmetic of
/// normalize_rows() (src/engine/normalize.cpp): ss = Σ_d (double)x·(double)x sequentially in d order,
/// norm = sqrt(ss), x ← (float)((double)x · (1.0 / norm)), with _rn intrinsics so that nvcc
/// cannot contract the double multiply-add into an FMA the host does not use.
/// Stream: the engine's. A query with a non-finite value is left untouched.
__global__ void __launch_bounds__(kPrepThreads)
    prepare_queries_kernel(float* __restrict__ queries, std::int64_t dim, int normalize,
                           unsigned long long* status) {
  __shared__ int bad;      // written before the 2nd barrier only
  __shared__ double inv;   // written by thread 0 between the 2nd and 3rd barriers; 0: zero norm
  const std::int64_t q = blockIdx.x;
  float* x = queries + q * dim;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  for (std::int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    if (!isfinite(x[d])) {
      atomicMin(status, query_status(q, d, 0));
      bad = 1;
    }
  }
  __syncthreads();
  if (bad || !normalize) return;
  if (threadIdx.x == 0) {
    double ss = 0.0;
    for (std::int64_t d = 0; d < dim; ++d) {
      const double v = static_cast<double>(x[d]);
      ss = __dadd_rn(ss, __dmul_rn(v, v));
    }
    const double norm = __dsqrt_rn(ss);
    if (!(norm > 0.0)) {
      atomicMin(status, query_status(q, 0, 1));
      inv = 0.0;
    } else {
      inv = __ddiv_rn(1.0, norm);
    }
  }
  __syncthreads();
  if (inv == 0.0) return;
  for (std::int64_t d = threadIdx.x; d < dim; d += blockDim.x)
    x[d] = __double2float_rn(__dmul_rn(static_cast<double>(x[d]), inv));
}

template <typename T>
__device__ __forceinline__ T storage_from_float(float x);
template <>
__device__ __forceinline__ float storage_from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half storage_from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 storage_from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/// float32 → TF32 (round to nearest, ties away; the low 13 mantissa bits zero).
__device__ __forceinline__ float to_tf32(float x) {
  std::uint32_t u;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
  return __uint_as_float(u);
}

/// Converts staging rows src [m, dim] (float32) into shard rows dst [m, dpad] (storage T; the
/// padding columns stay zero) and records in *status the first flat index (row0 + r)·dim + c
/// whose stored value is not finite (float16/bfloat16 overflow). Grid-stride.
template <typename T>
__global__ void convert_pad_kernel(const float* __restrict__ src, std::int64_t m, std::int64_t dim, std::int64_t dpad,
                                   T* __restrict__ dst, std::int64_t row0, unsigned long long* status) {
  const std::int64_t n = m * dim;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / dim, c = i % dim;
    const T v = storage_from_float<T>(src[i]);
    dst[r * dpad + c] = v;
    if (!isfinite(to_float(v))) atomicMin(status, static_cast<unsigned long long>((row0 + r) * dim + c));
  }
}

/// Generated rows (generator.hpp) into staging dst [m, dim]. Grid-stride.
__global__ void generate_kernel(float* __restrict__ dst, std::int64_t m, std::int64_t dim, std::uint64_t seed,
                                std::int64_t first_row) {
  const std::int64_t n = m * dim;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    dst[i] = generated_value(seed, first_row + i / dim, i % dim);
}

/// Generated rows straight into storage: dst [m, dpad] (storage T, padding stays zero), with the
/// overflow check of convert_pad_kernel (values are below 4 in magnitude: never fires). For
/// metrics without normalisation; one write of the shard instead of staging + convert.
template <typename T>
__global__ void generate_store_kernel(T* __restrict__ dst, std::int64_t m, std::int64_t dim, std::int64_t dpad,
                                      std::uint64_t seed, std::int64_t first_row) {
  const std::int64_t n = m * dim;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / dim, c = i % dim;
    dst[r * dpad + c] = storage_from_float<T>(generated_value(seed, first_row + r, c));
  }
}

/// L2-normalises staging rows x [m, dim] in place with normalize_rows()' arithmetic (float64
/// sum in index order, x · (1 / norm)); a zero-norm row's index (first_row + r) goes to *status.
__global__ void normalize_kernel(float* __restrict__ x, std::int64_t m, std::int64_t dim, std::int64_t first_row,
                                 unsigned long long* status) {
  const std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (r >= m) return;
  float* row = x + r * dim;
  double ss = 0.0;
  for (std::int64_t d = 0; d < dim; ++d) {
    const double v = static_cast<double>(row[d]);
    ss = __dadd_rn(ss, __dmul_rn(v, v));
  }
  const double norm = __dsqrt_rn(ss);
  if (!(norm > 0.0)) {
    atomicMin(status, static_cast<unsigned long long>(first_row + r));
    return;
  }
  const double inv = __ddiv_rn(1.0, norm);
  for (std::int64_t d = 0; d < dim; ++d) row[d] = __double2float_rn(__dmul_rn(static_cast<double>(row[d]), inv));
}

/// ‖x‖² of stored rows [rows, dpad] (warp per row, float64): into row_sq (float, when given) and
/// the maximum's bits into *max_sq_bits (non-negative doubles order like their bits).
template <typename T>
__global__ void row_norm_kernel(const T* __restrict__ shard, std::int64_t rows, std::int64_t dpad,
                                float* __restrict__ row_sq, unsigned long long* max_sq_bits) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x / 32) + (threadIdx.x >> 5); r < rows;
       r += warps) {
    double ss = 0.0;
    for (std::int64_t d = lane; d < dpad; d += 32) {
      const double v = static_cast<double>(to_float(shard[r * dpad + d]));
      ss += v * v;
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xFFFFFFFFu, ss, o);
    if (lane == 0) {
      if (row_sq) row_sq[r] = static_cast<float>(ss);
      atomicMax(max_sq_bits, static_cast<unsigned long long>(__double_as_longlong(ss)));
    }
  }
}

__global__ void fill_ids_kernel(std::int64_t* __restrict__ ids, std::int64_t n, std::int64_t first) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    ids[i] = first + i;
}

/// Block-wide sum of a double (kPrepThreads threads).
__device__ double block_sum(double v, double* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  double s = 0.0;
  if (threadIdx.x < 32) {
    s = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.0;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
  }
  __syncthreads();
  if (threadIdx.x == 0) red[0] = s;
  __syncthreads();
  const double r = red[0];
  __syncthreads();
  return r;
}

/// The batched GEMM's output type for storage type T: float16 shards write __half (half the
/// bytes per chunk, bench/NOTES.md "Sixth session"), the others float.
template <typename T>
using GemmOut = typename std::conditional<std::is_same<T, __half>::value, __half, float>::type;

/// Per-query preparation on every rank, block per query (kPrepThreads threads): qpad (the exact
/// query, zero-padded), and for the batched path qhat = round_T(q · 2^e) (16-bit types: e puts
/// max|q| in [2^14, 2^15), lowered until every GEMM output stays below 2^15 (__half output) or
/// 2^126 (float output), so none can overflow; TF32 for float32 storage) and QueryInfo: Δ, the bound on |approximate −
/// exact| score of docs/EXACTNESS.md, computed in float64 and rounded up. `max_sq`: the largest
/// stored ‖x‖² of the shard.
template <typename T, typename OutT>
__global__ void __launch_bounds__(kPrepThreads)
    prep_kernel(const float* __restrict__ queries, std::int64_t dim, std::int64_t dpad, float* __restrict__ qpad,
                T* __restrict__ qhat, QueryInfo* __restrict__ qinfo, double max_sq, int l2, int with_hat) {
  __shared__ double red[32];
  __shared__ float maxabs_s;
  const std::int64_t q = blockIdx.x;
  const float* x = queries + q * dim;
  float mx = 0.0f;
  double nq2 = 0.0;
  for (std::int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    mx = fmaxf(mx, fabsf(x[d]));
    nq2 += static_cast<double>(x[d]) * x[d];
  }
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
  if (threadIdx.x == 0) maxabs_s = 0.0f;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) atomicMax(reinterpret_cast<int*>(&maxabs_s), __float_as_int(mx));  // mx ≥ 0
  __syncthreads();
  nq2 = block_sum(nq2, red);
  constexpr bool kTf32 = std::is_same<T, float>::value;
  constexpr bool kHalfOut = std::is_same<OutT, __half>::value;
  const double M = sqrt(max_sq) * (1.0 + 0x1p-40);
  const double D = static_cast<double>(dpad);
  const double g_mma = (D + 2.0) * 0x1p-22;  // tensor-core float32 accumulation
  double scale = 1.0;
  if (!kTf32 && maxabs_s > 0.0f) {
    int ex = 0;
    (void)frexpf(maxabs_s, &ex);  // maxabs = m · 2^ex, m in [0.5, 1)
    int e = 15 - ex;
    // |GEMM output| ≤ 2^e · ‖q̂‖ · M · (1 + γ_mma), and ‖q̂‖ ≤ ‖q‖ · (1 + 2⁻⁸) (rounding to 16 bits).
    const double reach = sqrt(nq2) * M * (1.0 + 0x1p-8) * (1.0 + g_mma);
    if (reach > 0.0) {
      int ex2 = 0;
      (void)frexp(reach, &ex2);  // reach < 2^ex2
      // __half output below 2^15 (its largest finite value is 65,504); float output (bfloat16
      // shards) below 2^126, which only binds for rows of norm near bfloat16's range.
      e = min(e, (kHalfOut ? 15 : 126) - ex2);
    }
    // [-120, 100]: 1 / scale stays a float; admitted queries have ‖q‖ · M ≤ 2^127, so the cap
    // needs e ≥ -114 (float16 output) or e ≥ -2 (float).
    scale = ldexp(1.0, max(-120, min(100, e)));
  }
  double diff2 = 0.0, nqh2 = 0.0;
  for (std::int64_t d = threadIdx.x; d < dpad; d += blockDim.x) {
    const float v = d < dim ? x[d] : 0.0f;
    qpad[q * dpad + d] = v;
    if (with_hat) {
      double back;
      if constexpr (kTf32) {
        const float h = to_tf32(v);
        qhat[q * dpad + d] = h;
        back = h;
      } else {
        const T h = storage_from_float<T>(static_cast<float>(static_cast<double>(v) * scale));
        qhat[q * dpad + d] = h;
        back = static_cast<double>(to_float(h)) / scale;
      }
      diff2 += (static_cast<double>(v) - back) * (static_cast<double>(v) - back);
      nqh2 += back * back;
    }
  }
  diff2 = block_sum(diff2, red);
  nqh2 = block_sum(nqh2, red);
  if (threadIdx.x != 0) return;
  // docs/EXACTNESS.md: Δ ≥ |approx − exact| for every row of the shard.
  const double u = 0x1p-24;
  const double nq = sqrt(nq2), nqh = sqrt(nqh2), eq = sqrt(diff2);
  const double x_round = kTf32 ? 0x1p-10 : 0.0;                  // the GEMM rounds float32 rows to TF32
  const double g_exact = (D / 32.0 + 8.0 + 5.0) * u * 1.01;       // score.cuh: ≤ D/32 + 8 FMAs + 5 adds
  // A __half output adds its roundings (docs/EXACTNESS.md): cuBLAS may split the sum over d
  // into partial sums that it stores as __half before adding them (split-K reduced in the
  // output type), then rounds the total once more. Each rounding costs ≤ 2⁻¹⁰ of its value (a
  // full unit, whatever the rounding mode) and the partials' magnitudes add up to at most
  // (1 + γ_mma) ‖q̂‖ M, so all of them together cost ≤ 2 · 2⁻¹⁰ (1 + γ_mma) ‖q̂‖ M, plus one
  // subnormal step 2⁻²⁴ / 2^e per rounding: at most D_pad partials and the total.
  const double out_round =
      kHalfOut ? 2.0 * 0x1p-10 * (1.0 + g_mma) * nqh * M + (D + 1.0) * 0x1p-24 / scale : 0.0;
  const double dot_approx = eq * M + x_round * nqh * M + g_mma * nqh * M * (1.0 + x_round) + out_round;
  double delta;
  if (!l2) {
    delta = dot_approx + g_exact * nq * M;
  } else {
    const double epi = u * (M * M + nq2) + 2.0 * u * (2.02 * nqh * M + M * M + nq2);
    delta = 2.0 * dot_approx + epi + (g_exact + 3.0 * u) * (nq + M) * (nq + M);
  }
  delta = delta * 1.01 + 1e-37;
  qinfo[q] = QueryInfo{__double2float_ru(delta), static_cast<float>(1.0 / scale), static_cast<float>(nq2), 0.0f};
}

/// Number of elements of list [len] (sorted best first) that are better than c.
__device__ __forceinline__ int count_better(const Candidate* list, int len, const Candidate& c) {
  int lo = 0, hi = len;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (better(list[mid], c)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/// Number of elements of list [len] (sorted best first) that are better than or equal to c.
__device__ __forceinline__ int count_not_worse(const Candidate* list, int len, const Candidate& c) {
  int lo = 0, hi = len;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (!better(c, list[mid])) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/// Splits the final candidates [n] into ids [n] and reported scores [n] (l2: distance = −score),
/// so only k·(8+4) bytes per query cross to the host: ids and scores are the engine's pinned
/// host buffers, written through their device mapping (no copy node after the kernel).
__global__ void split_results_kernel(const Candidate* __restrict__ list, std::int64_t n, bool l2,
                                     std::int64_t* __restrict__ ids, float* __restrict__ scores) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const Candidate c = list[i];
  ids[i] = c.id;
  scores[i] = l2 ? -c.score : c.score;
}

struct MergeArgs {
  const Candidate* in;       // list l of query q at in + q * in_qstride + l * in_lstride
  std::int64_t in_qstride, in_lstride;
  int n_lists, len_in, fan_in;
  Candidate* out;            // group g of query q at out + q * out_qstride + g * out_lstride
  std::int64_t out_qstride, out_lstride;
  int len_out;
  std::int64_t n_groups, slices;  // grid = batch × n_groups × slices
};

/// Merges each group of fan_in consecutive sorted lists [len_in] into one sorted list
/// [len_out] (the best len_out; padding when the group holds fewer candidates). Element i of
/// list li lands at rank i + Σ_{lj<li} #(lj ≥ it) + Σ_{lj>li} #(lj > it): a permutation even
/// with equal elements, and independent of everything but the candidates themselves.
/// Block: kMergeThreads threads for kMergeElemsPerBlock elements of one group of one query.
/// Stream: the engine's.
__global__ void __launch_bounds__(kMergeThreads) merge_lists_kernel(MergeArgs a) {
  const std::int64_t slice = blockIdx.x % a.slices;
  const std::int64_t rest = blockIdx.x / a.slices;
  const std::int64_t g = rest % a.n_groups;
  const std::int64_t q = rest / a.n_groups;
  const int first_list = static_cast<int>(g * a.fan_in);
  const int gc = min(a.fan_in, a.n_lists - first_list);
  const Candidate* base = a.in + q * a.in_qstride + first_list * a.in_lstride;
  Candidate* dst = a.out + q * a.out_qstride + g * a.out_lstride;
  const std::int64_t total = static_cast<std::int64_t>(gc) * a.len_in;
  const std::int64_t e0 = slice * kMergeElemsPerBlock;
  const std::int64_t e1 = min(total, e0 + kMergeElemsPerBlock);
  for (std::int64_t e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
    const int li = static_cast<int>(e / a.len_in);
    const int i = static_cast<int>(e % a.len_in);
    if (i >= a.len_out) continue;  // its rank is at least i
    const Candidate c = base[li * a.in_lstride + i];
    std::int64_t rank = i;
    for (int lj = 0; lj < gc && rank < a.len_out; ++lj) {
      if (lj == li) continue;
      const Candidate* other = base + lj * a.in_lstride;
      rank += lj < li ? count_not_worse(other, a.len_in, c) : count_better(other, a.len_in, c);
    }
    if (rank < a.len_out) dst[rank] = c;
  }
  if (slice == 0)
    for (std::int64_t r = total + threadIdx.x; r < a.len_out; r += blockDim.x) dst[r] = pad_candidate();
}

// ---------------------------------------------------------------- RAII holders

struct DeviceBuffer {
  void* p = nullptr;
  int device = 0;
  ~DeviceBuffer() {
    if (p) {
      (void)cudaSetDevice(device);
      (void)cudaFree(p);
    }
  }
};

struct PinnedBuffer {
  void* p = nullptr;
  ~PinnedBuffer() {
    if (p) (void)cudaFreeHost(p);
  }
};

struct StreamHolder {
  cudaStream_t s = nullptr;
  int device = 0;
  ~StreamHolder() {
    if (s) {
      (void)cudaSetDevice(device);
      (void)cudaStreamSynchronize(s);
      (void)cudaStreamDestroy(s);
    }
  }
};

int grid_for(std::int64_t n, int threads) {
  return static_cast<int>(std::min<std::int64_t>((n + threads - 1) / threads, 65535LL * 16));
}

// ---------------------------------------------------------------- the engine

class CudaEngine final : public Engine {
 public:
  CudaEngine(const ShardInput& s, Metric metric, Dtype dtype, int device, const EngineLimits& lim)
      : device_(device), metric_(metric), dtype_(dtype), rows_(s.rows), dim_(s.dim), limits_(lim) {
    check_shape(s.rows, s.dim, lim);
    SHARDTOPK_EXPECTS(s.rows == 0 || s.generated || s.streamed || s.data != nullptr, "CUDA engine: shard of ", s.rows,
                      " rows given without data");
    int count = 0;
    const cudaError_t cerr = cudaGetDeviceCount(&count);
    if (cerr != cudaSuccess) {
      (void)cudaGetLastError();
      throw Error(detail::concat("CUDA engine: no usable GPU (cudaGetDeviceCount: ", cudaGetErrorName(cerr), ", ",
                                 cudaGetErrorString(cerr), ")"));
    }
    SHARDTOPK_EXPECTS(device >= 0 && device < count, "CUDA engine: device ", device, " does not exist (", count,
                      " visible; CUDA_VISIBLE_DEVICES=",
                      (std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "<unset>"), ")");
    CHECK_CUDA(cudaSetDevice(device));
    cudaDeviceProp prop{};
    CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
    device_name_ = prop.name;
    sms_ = prop.multiProcessorCount;
    cap_ = cand_cap(lim);
    const std::size_t sort_smem = static_cast<std::size_t>(cap_) * (sizeof(float) + sizeof(std::int64_t));
    SHARDTOPK_EXPECTS(prop.sharedMemPerBlockOptin >= sort_smem + 8192, "CUDA engine: device ", device, " (",
                      prop.name, ") offers ", prop.sharedMemPerBlockOptin,
                      " bytes of shared memory per block; the top-k sort for search.k_max=", lim.k_max, " needs ",
                      sort_smem + 8192, "; lower search.k_max");
    set_smem(reinterpret_cast<const void*>(cuda_detail::select1_kernel), sort_smem);
    set_smem(reinterpret_cast<const void*>(cuda_detail::final_batched_kernel<float, false>), sort_smem);
    set_smem(reinterpret_cast<const void*>(cuda_detail::final_batched_kernel<float, true>), sort_smem);
    set_smem(reinterpret_cast<const void*>(cuda_detail::final_batched_kernel<__half, false>), sort_smem);
    set_smem(reinterpret_cast<const void*>(cuda_detail::final_batched_kernel<__half, true>), sort_smem);
    set_smem(reinterpret_cast<const void*>(cuda_detail::final_batched_kernel<__nv_bfloat16, false>), sort_smem);
    set_smem(reinterpret_cast<const void*>(cuda_detail::final_batched_kernel<__nv_bfloat16, true>), sort_smem);

    plan_ = make_plan(s.rows, s.dim, dtype, lim);
    dpad_ = plan_.dpad;
    std::size_t free_b = 0, total_b = 0;
    CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
    if (plan_.total > free_b) throw_does_not_fit(free_b, total_b);

    stream_.device = device;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream_.s, cudaStreamNonBlocking));
    side_.device = device;
    CHECK_CUDA(cudaStreamCreateWithFlags(&side_.s, cudaStreamNonBlocking));
    for (int i = 0; i < 2; ++i) {
      CHECK_CUDA(cudaEventCreateWithFlags(&ev_scored_[i].e, cudaEventDisableTiming));
      CHECK_CUDA(cudaEventCreateWithFlags(&ev_filtered_[i].e, cudaEventDisableTiming));
    }
    arena_.device = device;
    const cudaError_t merr = cudaMalloc(&arena_.p, plan_.total);
    if (merr == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      arena_.p = nullptr;
      CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
      throw_does_not_fit(free_b, total_b);
    }
    CHECK_CUDA(merr);
    const std::size_t bk_host = static_cast<std::size_t>(lim.batch_max) * lim.k_max;
    pinned_queries_off_ = 4096 + round_up_u(4 * static_cast<std::uint64_t>(lim.batch_max), kAlign);
    pinned_ids_off_ = pinned_queries_off_ + round_up_u(4ull * lim.batch_max * s.dim, kAlign);
    pinned_scores_off_ = pinned_ids_off_ + round_up_u(8ull * bk_host, kAlign);
    CHECK_CUDA(cudaHostAlloc(&pinned_.p, pinned_scores_off_ + 4 * bk_host, cudaHostAllocDefault));

    char* base = static_cast<char*>(arena_.p);
    shard_ = base + plan_.off_shard;
    ids_ = reinterpret_cast<std::int64_t*>(base + plan_.off_ids);
    row_sq_ = metric == Metric::kL2 ? reinterpret_cast<float*>(base + plan_.off_row_sq) : nullptr;
    queries_ = reinterpret_cast<float*>(base + plan_.off_queries);
    qpad_ = reinterpret_cast<float*>(base + plan_.off_qpad);
    qhat_ = base + plan_.off_qhat;
    qinfo_ = reinterpret_cast<QueryInfo*>(base + plan_.off_qinfo);
    local_ = reinterpret_cast<Candidate*>(base + plan_.off_local);
    gathered_ = reinterpret_cast<Candidate*>(base + plan_.off_gathered);
    merged_ = reinterpret_cast<Candidate*>(base + plan_.off_merged);
    status_ = reinterpret_cast<unsigned long long*>(base + plan_.off_status);
    hists_ = reinterpret_cast<std::uint32_t*>(base + plan_.off_hists);
    counts_ = reinterpret_cast<std::uint32_t*>(base + plan_.off_counts);
    overflow_ = reinterpret_cast<std::uint32_t*>(base + plan_.off_overflow);
    thr_ = reinterpret_cast<float*>(base + plan_.off_thr);
    state_ = reinterpret_cast<Batch1State*>(base + plan_.off_state);
    pool_ = reinterpret_cast<PoolEntry*>(base + plan_.off_pool);
    scores_ = reinterpret_cast<float*>(base + plan_.off_scores);
    cublas_ws_ = base + plan_.off_cublas;
    host_status_ = static_cast<unsigned long long*>(pinned_.p);
    // The export kernel writes ids and scores straight into pinned memory (mapped into the
    // device's address space: cudaHostAlloc under unified addressing).
    void* pinned_dev = nullptr;
    CHECK_CUDA(cudaHostGetDevicePointer(&pinned_dev, pinned_.p, 0));
    out_ids_ = reinterpret_cast<std::int64_t*>(static_cast<char*>(pinned_dev) + pinned_ids_off_);
    out_scores_ = reinterpret_cast<float*>(static_cast<char*>(pinned_dev) + pinned_scores_off_);
    host_overflow_ = reinterpret_cast<std::uint32_t*>(static_cast<char*>(pinned_.p) + 4096);

    if (rows_ > 0) {
      CHECK_CUBLAS(cublasCreate(&cublas_.h));
      CHECK_CUBLAS(cublasSetStream(cublas_.h, stream_.s));
      CHECK_CUBLAS(cublasSetWorkspace(cublas_.h, cublas_ws_, kCublasWorkspace));
      CHECK_CUBLAS(cublasSetPointerMode(cublas_.h, CUBLAS_POINTER_MODE_HOST));
    }
    upload(s);
    const std::int64_t bk = static_cast<std::int64_t>(lim.batch_max) * lim.k_max;
    fill_pad(local_, bk);
    fill_pad(gathered_, bk * lim.world_size);
    fill_pad(merged_, bk);
    CHECK_CUDA(cudaMemsetAsync(qpad_, 0, static_cast<std::size_t>(lim.batch_max) * dpad_ * sizeof(float), stream_.s));
    CHECK_CUDA(cudaMemsetAsync(status_ + kStatusScanDir, 0, sizeof(unsigned long long), stream_.s));
    CHECK_CUDA(cudaStreamSynchronize(stream_.s));
    counters_ = {};
    const char* ng = std::getenv("SHARDTOPK_NO_GRAPH");
    use_graphs_ = !(ng && *ng && std::string(ng) != "0");
    // Batch-1 scans alternate direction with L2 eviction hints (scan1_kernel's dir);
    // SHARDTOPK_SCAN_L2=0: forward with plain loads (A B runs, tests).
    const char* l2 = std::getenv("SHARDTOPK_SCAN_L2");
    scan_dir_ = (l2 && std::string(l2) == "0") ? nullptr : reinterpret_cast<std::uint32_t*>(status_ + kStatusScanDir);
    // SHARDTOPK_SCAN_ROWS=2 (tests, A B runs): 2 rows × 4 chunks per warp at every D.
    const char* sr = std::getenv("SHARDTOPK_SCAN_ROWS");
    scan_two_rows_ = sr && std::string(sr) == "2";
  }

  ~CudaEngine() override {
    for (auto& kv : graphs_) (void)cudaGraphExecDestroy(kv.second);
    // A streamed upload abandoned by an exception: no copy may still read the pinned buffers.
    if (up_buf_[0].p || up_buf_[1].p) (void)cudaStreamSynchronize(stream_.s);
  }

  std::string name() const override { return "cuda"; }
  MemSpace space() const override { return MemSpace::kDevice; }
  Metric metric() const override { return metric_; }
  Dtype dtype() const override { return dtype_; }
  std::int64_t rows() const override { return rows_; }
  std::int64_t dim() const override { return dim_; }
  float* query_buffer() override { return queries_; }
  Candidate* local_buffer() override { return local_; }
  Candidate* gathered_buffer() override { return gathered_; }
  Candidate* merged_buffer() override { return merged_; }

  /// Validates queries [batch, dim] (device) for every metric and normalises them for cosine.
  /// One 8-byte status readback into pinned memory per call (not counted in
  /// transfer_counters(), which count only query and result traffic); returns after the
  /// stream has drained. @throws Error naming the first bad query.
  void prepare_queries(float* queries, int batch) override {
    SHARDTOPK_EXPECTS(batch >= 0 && batch <= limits_.batch_max, "batch of ", batch,
                      " queries out of range: allowed 0 .. ", limits_.batch_max, " (search.batch_max)");
    if (batch == 0) return;
    SHARDTOPK_EXPECTS(queries != nullptr, "prepare_queries: no queries given");
    DeviceGuard guard(device_);
    CHECK_CUDA(cudaMemsetAsync(status_, 0xFF, sizeof(unsigned long long), stream_.s));
    prepare_queries_kernel<<<batch, kPrepThreads, 0, stream_.s>>>(queries, dim_, metric_ == Metric::kCosine ? 1 : 0,
                                                                  status_);
    CHECK_CUDA_LAUNCH();
    CHECK_CUDA(cudaMemcpyAsync(host_status_, status_, sizeof(unsigned long long), cudaMemcpyDeviceToHost, stream_.s));
    CHECK_CUDA(cudaStreamSynchronize(stream_.s));
    const unsigned long long st = host_status_[0];
    if (st == kStatusOk) return;
    const std::int64_t q = static_cast<std::int64_t>(st >> 40);
    const std::int64_t col = static_cast<std::int64_t>((st >> 1) & ((1ull << 39) - 1));
    if ((st & 1) == 1)
      throw Error(detail::concat("query ", q, " has zero norm and cannot be scored by cosine similarity"));
    float v = 0.0f;
    CHECK_CUDA(cudaMemcpyAsync(&host_status_[1], queries + q * dim_ + col, sizeof(float), cudaMemcpyDeviceToHost,
                               stream_.s));
    CHECK_CUDA(cudaStreamSynchronize(stream_.s));
    std::memcpy(&v, &host_status_[1], sizeof v);
    throw Error(detail::concat("query ", q, " of the batch has a non-finite value (", v, ") at column ", col));
  }

  /// Enqueues the local top-k of queries [batch, dim] (device, float32) into out [batch, k]
  /// (device), best first by the ordering rule, on the engine's stream, through one CUDA graph
  /// per (queries, out, k, batch, with or without the export), captured once and replayed.
  /// Batch 1 returns without waiting; batch ≥ 2 waits for its
  /// overflow flags and re-runs an overflowing query through the batch-1 path (same bits).
  void search(const float* queries, int batch, int k, Candidate* out) override {
    search_impl(queries, batch, k, out, /*export_too=*/false);
  }

  /// search(), and the export of out queued before the batched path's one wait (batch ≥ 2:
  /// one host wait per batch instead of two).
  void search_and_export(const float* queries, int batch, int k, Candidate* out) override {
    search_impl(queries, batch, k, out, /*export_too=*/true);
  }

  void search_impl(const float* queries, int batch, int k, Candidate* out, bool export_too) {
    SHARDTOPK_EXPECTS(batch >= 0 && batch <= limits_.batch_max, "batch of ", batch,
                      " queries out of range: allowed 0 .. ", limits_.batch_max, " (search.batch_max)");
    SHARDTOPK_EXPECTS(k >= 1 && k <= limits_.k_max, "k=", k, " out of range: allowed 1 .. ", limits_.k_max,
                      " (search.k_max)");
    if (batch == 0) {
      if (export_too) note_export(0, k);
      return;
    }
    SHARDTOPK_EXPECTS(queries != nullptr && out != nullptr, "search: null query or output buffer");
    DeviceGuard guard(device_);
    const char* force = std::getenv("SHARDTOPK_FORCE_PATH");  // tests: "scan" or "gemm"
    const bool force_scan = force && std::string(force) == "scan";
    const bool force_gemm = force && std::string(force) == "gemm";
    if (rows_ > 0 && !((batch == 1 && !force_gemm) || force_scan)) {
      search_batched(queries, batch, k, out, export_too);
      return;
    }
    // Batch 1 (or an empty shard): one scan + select per query, then the export: one graph.
    replay(queries, out, k, batch, export_too, [&] {
      if (rows_ == 0) {
        fill_pad(out, static_cast<std::int64_t>(batch) * k);
      } else {
        for (int q = 0; q < batch; ++q)
          enqueue1(queries + static_cast<std::int64_t>(q) * dim_, k, out + static_cast<std::int64_t>(q) * k);
      }
      if (export_too) export_ops(out, batch, k);
    });
    if (export_too) note_export(batch, k);
  }


  /// Merges lists [parts, batch, k] (device, each best first) into out [batch, k] (device) on
  /// the engine's stream; returns without waiting. `out` must not overlap `lists`.
  void merge(const Candidate* lists, int parts, int batch, int k, Candidate* out) override {
    SHARDTOPK_EXPECTS(parts >= 1, "merge: parts must be >= 1 (got ", parts, ")");
    SHARDTOPK_EXPECTS(batch >= 0 && batch <= limits_.batch_max, "merge: batch of ", batch,
                      " out of range: allowed 0 .. ", limits_.batch_max);
    SHARDTOPK_EXPECTS(k >= 1 && k <= limits_.k_max, "merge: k=", k, " out of range: allowed 1 .. ", limits_.k_max);
    if (batch == 0) return;
    SHARDTOPK_EXPECTS(lists != nullptr && out != nullptr, "merge: null buffer");
    DeviceGuard guard(device_);
    MergeArgs a;
    a.in = lists;
    a.in_qstride = k;
    a.in_lstride = static_cast<std::int64_t>(batch) * k;
    a.n_lists = parts;
    a.len_in = k;
    a.fan_in = parts;
    a.out = out;
    a.out_qstride = k;
    a.out_lstride = 0;
    a.len_out = k;
    a.n_groups = 1;
    const std::int64_t per_group = static_cast<std::int64_t>(parts) * k;
    a.slices = std::max<std::int64_t>(1, (per_group + kMergeElemsPerBlock - 1) / kMergeElemsPerBlock);
    const std::int64_t blocks = static_cast<std::int64_t>(batch) * a.slices;
    SHARDTOPK_ASSERT(blocks <= std::numeric_limits<int>::max());
    merge_lists_kernel<<<static_cast<unsigned>(blocks), kMergeThreads, 0, stream_.s>>>(a);
    CHECK_CUDA_LAUNCH();
  }

  /// ids [batch, k] and reported scores [batch, k] of list (device) to the host: exactly
  /// k × (8 + 4) bytes per query device→host, one wait.
  void export_results(const Candidate* list, int batch, int k, std::int64_t* ids, float* scores) override {
    enqueue_export(list, batch, k);
    synchronize();
    read_export(ids, scores);
  }

  /// Host queries [batch, dim] → pinned staging → query_buffer(), queued on the stream; returns
  /// at once (the caller's array is free when this returns).
  void stage_queries(const float* host_queries, int batch) override {
    SHARDTOPK_EXPECTS(batch >= 0 && batch <= limits_.batch_max, "batch of ", batch,
                      " queries out of range: allowed 0 .. ", limits_.batch_max);
    const std::size_t bytes = sizeof(float) * static_cast<std::size_t>(batch) * dim_;
    if (bytes == 0) return;
    DeviceGuard guard(device_);
    // The previous batch's upload must have left the staging buffer (the stream is idle between
    // searches on the index's path; tests may call this back to back).
    CHECK_CUDA(cudaStreamSynchronize(stream_.s));
    float* pinned = reinterpret_cast<float*>(static_cast<char*>(pinned_.p) + pinned_queries_off_);
    std::memcpy(pinned, host_queries, bytes);
    CHECK_CUDA(cudaMemcpyAsync(queries_, pinned, bytes, cudaMemcpyHostToDevice, stream_.s));
    counters_.host_to_device += bytes;
  }

  const float* staged_host_queries() const override {
    return reinterpret_cast<const float*>(static_cast<const char*>(pinned_.p) + pinned_queries_off_);
  }

  /// Queues the split of list [batch, k] into ids and reported scores and their copy into pinned
  /// memory (k × 12 bytes per query), without waiting.
  void enqueue_export(const Candidate* list, int batch, int k) override {
    SHARDTOPK_EXPECTS(batch >= 0 && batch <= limits_.batch_max && k >= 1 && k <= limits_.k_max,
                      "enqueue_export: batch ", batch, " / k=", k, " out of range");
    note_export(batch, k);
    DeviceGuard guard(device_);
    export_ops(list, batch, k);
  }

  /// The answer of the last enqueue_export() (its kernel must have completed on the stream).
  void read_export(std::int64_t* ids, float* scores) override {
    const std::size_t n = static_cast<std::size_t>(pending_export_batch_) * pending_export_k_;
    if (ids) std::memcpy(ids, static_cast<char*>(pinned_.p) + pinned_ids_off_, n * sizeof(std::int64_t));
    if (scores) std::memcpy(scores, static_cast<char*>(pinned_.p) + pinned_scores_off_, n * sizeof(float));
  }

  void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_);
    CHECK_CUDA(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_.s));
    CHECK_CUDA(cudaStreamSynchronize(stream_.s));
    counters_.device_to_host += bytes;
  }

  void* alloc_host_staging(std::size_t bytes) override {
    DeviceGuard guard(device_);
    staging_.emplace_back();
    CHECK_CUDA(cudaHostAlloc(&staging_.back().p, std::max<std::size_t>(bytes, 1), cudaHostAllocDefault));
    return staging_.back().p;
  }

  void copy_from_host(void* dst, const void* host_src, std::size_t bytes) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_);
    CHECK_CUDA(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_.s));
    CHECK_CUDA(cudaStreamSynchronize(stream_.s));
    counters_.host_to_device += bytes;
  }

  /// Device-to-device copy, not counted. `src` may have been written on another stream (a
  /// caller's device queries; the interface carries no stream), so the device is synchronised
  /// first; returns when the copy is done.
  void copy_within(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_);
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_.s));
    CHECK_CUDA(cudaStreamSynchronize(stream_.s));
  }

  void synchronize() override {
    DeviceGuard guard(device_);
    CHECK_CUDA(cudaStreamSynchronize(stream_.s));
  }

  void* stream() override { return stream_.s; }

  TransferCounters transfer_counters() const override { return counters_; }
  void reset_transfer_counters() override { counters_ = {}; }
  std::uint64_t resident_bytes() const override { return plan_.total; }

 private:
  /// The host-side record of an export (what read_export() returns, the transfer counters); the
  /// device side is export_ops(), which a graph may hold.
  void note_export(int batch, int k) {
    pending_export_batch_ = batch;
    pending_export_k_ = k;
    counters_.device_to_host += static_cast<std::uint64_t>(batch) * k * (sizeof(std::int64_t) + sizeof(float));
  }

  /// The split of list [batch, k] into the pinned ids and scores (capturable).
  void export_ops(const Candidate* list, int batch, int k) {
    const std::int64_t n = static_cast<std::int64_t>(batch) * k;
    if (n == 0) return;
    split_results_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream_.s>>>(
        list, n, metric_ == Metric::kL2, out_ids_, out_scores_);
    CHECK_CUDA_LAUNCH();
  }

  static void set_smem(const void* fn, std::size_t bytes) {
    CHECK_CUDA(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }

  [[noreturn]] void throw_does_not_fit(std::size_t free_b, std::size_t total_b) const {
    throw Error(detail::concat(
        "CUDA engine on device ", device_, " (", device_name_, "): the shard of ", rows_, " rows x ", dim_, " dims in ",
        dtype_name(dtype_), " needs ", plan_.total, " bytes of device memory (shard, ids and norms ",
        plan_.shard_bytes, ", query/candidate buffers and workspace ", plan_.total - plan_.shard_bytes, ") but only ",
        free_b, " of ", total_b, " bytes are free; add ranks (mpirun -np) so that each shard is smaller",
        (dtype_ == Dtype::kFloat32 ? ", or store the shard as float16/bfloat16 (engine.dtype)" : ""),
        ", or lower search.batch_max / search.k_max"));
  }

  void fill_pad(Candidate* p, std::int64_t n) {
    if (n == 0) return;
    fill_pad_kernel<<<grid_for(n, 256), 256, 0, stream_.s>>>(p, n);
    CHECK_CUDA_LAUNCH();
  }

  int persistent_grid(const void* fn, int threads, std::size_t smem) const {
    int per_sm = 0;
    CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, threads, smem));
    return std::max(1, per_sm) * sms_;
  }

  // ------------------------------------------------------------ upload

  /// Uploads (or generates) the rows in chunks through the scores workspace: float32 staging →
  /// storage dtype, zero-padded to dpad; then ids, ‖x‖² and the largest norm. Synchronous;
  /// checks float16/bfloat16 overflow and, for generated cosine shards, zero norms.
  void upload(const ShardInput& s) {
    if (rows_ == 0) {
      streaming_ = s.streamed;  // an empty streamed shard: finish_upload() only
      return;
    }
    CHECK_CUDA(cudaMemsetAsync(shard_, 0, static_cast<std::size_t>(rows_) * dpad_ * storage_bytes(dtype_), stream_.s));
    if (s.ids) {
      CHECK_CUDA(cudaMemcpyAsync(ids_, s.ids, sizeof(std::int64_t) * rows_, cudaMemcpyHostToDevice, stream_.s));
    } else {
      fill_ids_kernel<<<grid_for(rows_, 256), 256, 0, stream_.s>>>(ids_, rows_, s.first_row);
      CHECK_CUDA_LAUNCH();
    }
    CHECK_CUDA(cudaMemsetAsync(status_, 0xFF, 2 * sizeof(unsigned long long), stream_.s));
    if (s.streamed) {  // rows follow through upload_rows(); finish_upload() ends with upload_checks()
      SHARDTOPK_EXPECTS(metric_ != Metric::kCosine, "CUDA engine: a streamed shard cannot be cosine (rows are "
                                                    "normalised on the host before the upload)");
      streaming_ = true;
      stream_ids_ = s.ids;
      stream_first_row_ = s.first_row;
      return;
    }
    if (s.generated && metric_ != Metric::kCosine) {
      switch (dtype_) {
        case Dtype::kFloat32: generate_store<float>(s); break;
        case Dtype::kFloat16: generate_store<__half>(s); break;
        case Dtype::kBFloat16: generate_store<__nv_bfloat16>(s); break;
      }
    } else if (s.generated) {  // cosine: generated float32 rows are normalised before storage
      const std::int64_t chunk = staging_rows();
      for (std::int64_t r0 = 0; r0 < rows_; r0 += chunk) {
        const std::int64_t m = std::min(chunk, rows_ - r0);
        generate_kernel<<<grid_for(m * dim_, 256), 256, 0, stream_.s>>>(scores_, m, dim_, s.seed, s.first_row + r0);
        CHECK_CUDA_LAUNCH();
        normalize_kernel<<<grid_for(m, 128), 128, 0, stream_.s>>>(scores_, m, dim_, s.first_row + r0, status_ + 1);
        CHECK_CUDA_LAUNCH();
        convert_staged(m, r0);
      }
    } else {
      upload_block(s.data, rows_, 0);
    }
    upload_checks(s);
  }

  /// Rows per chunk staged as float32 in the scores workspace during an upload.
  std::int64_t staging_rows() const {
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(plan_.scores_bytes / (4 * dim_)));
  }

  /// The float32 rows [m, dim] staged in scores_ → storage rows [first, first + m), padded to dpad.
  void convert_staged(std::int64_t m, std::int64_t first) {
    switch (dtype_) {
      case Dtype::kFloat32: convert<float>(m, first); break;
      case Dtype::kFloat16: convert<__half>(m, first); break;
      case Dtype::kBFloat16: convert<__nv_bfloat16>(m, first); break;
    }
  }

  /// Host float32 rows data [rows, dim] → storage rows [first, first + rows), through the scores
  /// workspace in chunks (H2D copy, then convert + pad, in stream order). A pageable source is
  /// staged by cudaMemcpyAsync before it returns; the caller decides how to wait for a pinned one.
  void upload_block(const float* data, std::int64_t rows, std::int64_t first) {
    const std::int64_t chunk = staging_rows();
    for (std::int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const std::int64_t m = std::min(chunk, rows - r0);
      CHECK_CUDA(cudaMemcpyAsync(scores_, data + r0 * dim_, sizeof(float) * m * dim_, cudaMemcpyHostToDevice,
                                 stream_.s));
      convert_staged(m, first + r0);
    }
  }

  /// The end of every upload: ‖x‖², the largest norm, and the status checks (zero-norm cosine
  /// rows, storage overflow). Synchronous.
  void upload_checks(const ShardInput& s) {
    CHECK_CUDA(cudaMemsetAsync(status_ + 2, 0, sizeof(unsigned long long), stream_.s));
    switch (dtype_) {
      case Dtype::kFloat32: norms<float>(); break;
      case Dtype::kFloat16: norms<__half>(); break;
      case Dtype::kBFloat16: norms<__nv_bfloat16>(); break;
    }
    CHECK_CUDA(cudaMemcpyAsync(host_status_, status_, 3 * sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                               stream_.s));
    CHECK_CUDA(cudaStreamSynchronize(stream_.s));
    if (host_status_[1] != kStatusOk)
      throw Error(detail::concat("corpus row ", host_status_[1],
                                 " has zero norm and cannot be scored by cosine similarity"));
    const unsigned long long st = host_status_[0];
    if (st != kStatusOk) {
      const std::int64_t row = static_cast<std::int64_t>(st) / dim_, col = static_cast<std::int64_t>(st) % dim_;
      const std::int64_t gid = s.ids ? s.ids[row] : s.first_row + row;
      const std::string val = s.generated ? std::string(" (generated)")
                              : s.data    ? " value " + detail::concat(s.data[st])
                                          : std::string();
      throw Error(detail::concat("corpus row ", gid, val, " at column ", col, " overflows ", dtype_name(dtype_),
                                 "; use engine.dtype float32"));
    }
    double mx = 0.0;
    std::memcpy(&mx, &host_status_[2], sizeof mx);
    max_sq_ = mx;
  }

  // ------------------------------------------------------------ streamed upload

  float* upload_buffer(std::int64_t rows) override {
    SHARDTOPK_EXPECTS(streaming_, "upload_buffer: this CUDA engine was not built with ShardInput::streamed, or its "
                                  "upload has finished");
    SHARDTOPK_EXPECTS(rows >= 1 && rows <= rows_, "upload_buffer: ", rows, " rows out of range 1 .. ", rows_);
    DeviceGuard guard(device_);
    if (up_cap_rows_ == 0) up_cap_rows_ = rows;
    SHARDTOPK_EXPECTS(rows <= up_cap_rows_, "upload_buffer: ", rows, " rows, more than the first call's ",
                      up_cap_rows_);
    const int i = up_next_;
    up_next_ ^= 1;
    if (!up_buf_[i].p) {  // allocated on first use: a one-block shard pins one buffer, not two
      const std::size_t bytes = sizeof(float) * static_cast<std::size_t>(up_cap_rows_) * dim_;
      CHECK_CUDA(cudaHostAlloc(&up_buf_[i].p, bytes, cudaHostAllocDefault));
      CHECK_CUDA(cudaEventCreateWithFlags(&up_ev_[i].e, cudaEventDisableTiming));
      CHECK_CUDA(cudaEventRecord(up_ev_[i].e, stream_.s));
    }
    CHECK_CUDA(cudaEventSynchronize(up_ev_[i].e));  // its previous copy has left the buffer
    return static_cast<float*>(up_buf_[i].p);
  }

  void upload_rows(std::int64_t first, std::int64_t rows, const float* data) override {
    SHARDTOPK_EXPECTS(streaming_, "upload_rows: this CUDA engine was not built with ShardInput::streamed, or its "
                                  "upload has finished");
    SHARDTOPK_EXPECTS(first == up_rows_done_ && rows >= 0 && first + rows <= rows_, "upload_rows: rows [", first,
                      ", ", first + rows, ") out of order or range: expected row ", up_rows_done_, " of ", rows_);
    SHARDTOPK_EXPECTS(rows == 0 || data != nullptr, "upload_rows: no data");
    if (rows == 0) return;
    DeviceGuard guard(device_);
    upload_block(data, rows, first);
    // Data inside one of upload_buffer()'s pinned buffers: its event says when the copy has left
    // it. Any other memory: wait here, so the caller may reuse or free it on return (pinned
    // memory of its own would otherwise still be read by the asynchronous copy).
    bool ours = false;
    const std::size_t cap_bytes = sizeof(float) * static_cast<std::size_t>(up_cap_rows_) * dim_;
    for (int i = 0; i < 2; ++i) {
      const char* p = static_cast<const char*>(up_buf_[i].p);
      const char* d = reinterpret_cast<const char*>(data);
      if (p && d >= p && d < p + cap_bytes) {
        CHECK_CUDA(cudaEventRecord(up_ev_[i].e, stream_.s));
        ours = true;
      }
    }
    if (!ours) CHECK_CUDA(cudaStreamSynchronize(stream_.s));
    up_rows_done_ += rows;
  }

  void finish_upload() override {
    SHARDTOPK_EXPECTS(streaming_, "finish_upload: this CUDA engine was not built with ShardInput::streamed, or its "
                                  "upload has finished");
    SHARDTOPK_EXPECTS(up_rows_done_ == rows_, "finish_upload: ", up_rows_done_, " of ", rows_, " rows uploaded");
    if (rows_ == 0) {
      streaming_ = false;
      return;
    }
    DeviceGuard guard(device_);
    CHECK_CUDA(cudaStreamSynchronize(stream_.s));
    streaming_ = false;
    for (int i = 0; i < 2; ++i) {
      if (up_buf_[i].p) (void)cudaFreeHost(up_buf_[i].p);
      up_buf_[i].p = nullptr;
    }
    ShardInput s;
    s.rows = rows_;
    s.dim = dim_;
    s.ids = stream_ids_;
    s.first_row = stream_first_row_;
    upload_checks(s);
    stream_ids_ = nullptr;
  }

  template <typename T>
  void generate_store(const ShardInput& s) {
    const std::int64_t per = std::max<std::int64_t>(1, (std::int64_t{1} << 28) / dim_);  // bounded launches
    for (std::int64_t r0 = 0; r0 < rows_; r0 += per) {
      const std::int64_t m = std::min(per, rows_ - r0);
      generate_store_kernel<T><<<grid_for(m * dim_, 256), 256, 0, stream_.s>>>(
          static_cast<T*>(shard_) + r0 * dpad_, m, dim_, dpad_, s.seed, s.first_row + r0);
      CHECK_CUDA_LAUNCH();
    }
  }

  template <typename T>
  void convert(std::int64_t m, std::int64_t r0) {
    convert_pad_kernel<T><<<grid_for(m * dim_, 256), 256, 0, stream_.s>>>(
        scores_, m, dim_, dpad_, static_cast<T*>(shard_) + r0 * dpad_, r0, status_);
    CHECK_CUDA_LAUNCH();
  }

  template <typename T>
  void norms() {
    row_norm_kernel<T><<<grid_for(rows_ * 32, 256), 256, 0, stream_.s>>>(static_cast<const T*>(shard_), rows_, dpad_,
                                                                           row_sq_, status_ + 2);
    CHECK_CUDA_LAUNCH();
  }

  // ------------------------------------------------------------ batch 1

  /// Replays the CUDA graph of `enqueue` for (queries, out, k, batch, export_too), capturing it on
  /// first use (bounded cache). Graphs take the per-batch launch cost off the host: the batched
  /// path is hundreds of kernels. export_too: the graph ends with the export.
  template <typename Enqueue>
  void replay(const float* queries, Candidate* out, int k, int batch, bool export_too, const Enqueue& enqueue) {
    if (!use_graphs_) return enqueue();
    const auto key = std::make_tuple(queries, out, k, batch, export_too);
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      cudaGraph_t g = nullptr;
      CHECK_CUDA(cudaStreamBeginCapture(stream_.s, cudaStreamCaptureModeThreadLocal));
      try {
        enqueue();
      } catch (...) {
        (void)cudaStreamEndCapture(stream_.s, &g);
        if (g) (void)cudaGraphDestroy(g);
        throw;
      }
      CHECK_CUDA(cudaStreamEndCapture(stream_.s, &g));
      cudaGraphExec_t exec = nullptr;
      const cudaError_t ierr = cudaGraphInstantiate(&exec, g, 0);
      (void)cudaGraphDestroy(g);
      CHECK_CUDA(ierr);
      if (graphs_.size() >= 128) {  // bounded cache: drop all (rare: many distinct k and batch sizes)
        for (auto& kv : graphs_) (void)cudaGraphExecDestroy(kv.second);
        graphs_.clear();
      }
      it = graphs_.emplace(key, exec).first;
    }
    CHECK_CUDA(cudaGraphLaunch(it->second, stream_.s));
  }

  void enqueue1(const float* query, int k, Candidate* out) {
    switch (dtype_) {
      case Dtype::kFloat32: return enqueue1_t<float>(query, k, out);
      case Dtype::kFloat16: return enqueue1_t<__half>(query, k, out);
      case Dtype::kBFloat16: return enqueue1_t<__nv_bfloat16>(query, k, out);
    }
  }

  template <typename T>
  void enqueue1_t(const float* query, int k, Candidate* out) {
    if (metric_ == Metric::kL2) return enqueue1_m<T, true>(query, k, out);
    enqueue1_m<T, false>(query, k, out);
  }

  /// Rows per warp of the batch-1 scan, from the row's 16-byte chunks: 2 rows × up to 4 chunks
  /// per lane above 64 chunks, 4 × 2 for 33–64 (e.g. D = 384 float16), 8 × 1 for 17–32, and
  /// 8 rows (4 pairs side by side, 16 lanes each) × 1 up to 16 chunks (D ≤ 128 float16; 16 rows
  /// measured slower: 96–106 registers) (bench/NOTES.md, "Tenth session");
  /// SHARDTOPK_SCAN_ROWS=2 (tests, A B runs) takes 2 × 4 at every D. An engine's shape never
  /// changes (nvec and the switch are fixed at construction).
  template <typename T, bool kL2>
  void enqueue1_m(const float* query, int k, Candidate* out) {
    const int nvec = static_cast<int>(dpad_ / cuda_detail::VecTraits<T>::kElems);
    if (scan_two_rows_ || nvec > 64) return scan_select1<T, kL2, 2, 4, 32>(nvec, query, k, out);
    if (nvec > 32) return scan_select1<T, kL2, 4, 2, 32>(nvec, query, k, out);
    if (nvec > 16) return scan_select1<T, kL2, 8, 1, 32>(nvec, query, k, out);
    return scan_select1<T, kL2, 4, 1, 16>(nvec, query, k, out);
  }

  /// One batch-1 search with scan shape kR × kC × kLanes (scan1_kernel); nvec: 16-byte chunks per
  /// row, at most 16 when kLanes is 16 (enqueue1_m's choice).
  template <typename T, bool kL2, int kR, int kC, int kLanes>
  void scan_select1(int nvec, const float* query, int k, Candidate* out) {
    using namespace cuda_detail;
    CHECK_CUDA(cudaMemsetAsync(hists_, 0, plan_.off_pool - plan_.off_hists, stream_.s));  // hists … state
    const std::size_t qsmem = static_cast<std::size_t>(dpad_) * sizeof(float);
    // Small shards: fewer blocks (each flushes a histogram and all must finish before select1).
    const int pgrid = scan_grid<T, kL2, kR, kC, kLanes>(qsmem);
    int grid = static_cast<int>(std::min<std::int64_t>(pgrid, (rows_ + 255) / 256));
    // Large shards: blocks of kScanBlockRows contiguous rows, scheduled by the hardware, instead
    // of the persistent grid-stride loop (10M × 768 float16 / float32: −3 % device time; at 1M,
    // under ~2 waves of such blocks, the persistent grid stays 1–3 % ahead; bench/NOTES.md,
    // "Seventh session").
    const char* sched = std::getenv("SHARDTOPK_SCAN_SCHEDULE");  // tests: "blocked" or "persistent"
    std::int64_t rpb = 0;
    const bool big = rows_ >= kScanBlockedWaves * kScanBlockRows * static_cast<std::int64_t>(pgrid);
    if (sched ? std::string(sched) == "blocked" : big) {
      rpb = kScanBlockRows;
      grid = static_cast<int>((rows_ + rpb - 1) / rpb);
    }
    const std::uint32_t uk = static_cast<std::uint32_t>(k), ucap = static_cast<std::uint32_t>(cap_);
    const std::int64_t keep_rows = static_cast<std::int64_t>(kScanL2KeepBytes) / (dpad_ * static_cast<std::int64_t>(sizeof(T)));
    scan1_kernel<T, kL2, kR, kC, kLanes><<<grid, kScanThreads, qsmem, stream_.s>>>(
        static_cast<const T*>(shard_), rows_, nvec, query, static_cast<int>(dim_), scores_, hists_, uk, ucap, state_,
        rpb, scan_dir_, std::max<std::int64_t>(0, rows_ - keep_rows));
    CHECK_CUDA_LAUNCH();
    const std::size_t smem = static_cast<std::size_t>(cap_) * (sizeof(float) + sizeof(std::int64_t));
    if (select_grid_ == 0)
      select_grid_ = persistent_grid(reinterpret_cast<const void*>(select1_kernel), kSelThreads, smem);
    const int sel_grid =
        static_cast<int>(std::min<std::int64_t>(select_grid_, (rows_ + kSelThreads - 1) / kSelThreads));
    select1_kernel<<<sel_grid, kSelThreads, smem, stream_.s>>>(scores_, rows_, hists_, uk, ucap, state_, state_->bar,
                                                               pool_, counts_, ids_, out);
    CHECK_CUDA_LAUNCH();
  }

  /// The persistent grid of the engine's scan shape (one per engine: enqueue1_m), cached.
  template <typename T, bool kL2, int kR, int kC, int kLanes>
  int scan_grid(std::size_t qsmem) {
    int& g = scan_grid_cache_;
    if (g == 0) g = persistent_grid(reinterpret_cast<const void*>(cuda_detail::scan1_kernel<T, kL2, kR, kC, kLanes>),
                                    cuda_detail::kScanThreads, qsmem);
    return g;
  }

  // ------------------------------------------------------------ batched

  /// export_too: also queue the export of out (search_and_export) before the one wait.
  void search_batched(const float* queries, int batch, int k, Candidate* out, bool export_too) {
    switch (dtype_) {
      case Dtype::kFloat32: return batched_t<float>(queries, batch, k, out, export_too);
      case Dtype::kFloat16: return batched_t<__half>(queries, batch, k, out, export_too);
      case Dtype::kBFloat16: return batched_t<__nv_bfloat16>(queries, batch, k, out, export_too);
    }
  }

  template <typename T>
  void batched_t(const float* queries, int batch, int k, Candidate* out, bool export_too) {
    if (metric_ == Metric::kL2) return batched_m<T, true>(queries, batch, k, out, export_too);
    batched_m<T, false>(queries, batch, k, out, export_too);
  }

  /// Rows per chunk for a batch (the largest; see enqueue_batched for the first chunks): the
  /// [batch, R] GEMM output (float, __half for float16 shards) fits one ping-pong buffer
  /// (L2-resident). float32 storage (TF32 GEMM) stays at 65,536 rows: longer chunks measured 6 %
  /// slower at B = 8, while float16 gained 11 % there (bench/NOTES.md, "Batched chunks").
  std::int64_t chunk_rows(int batch, std::uint64_t out_bytes) const {
    std::int64_t r =
        static_cast<std::int64_t>(plan_.sbuf_bytes / (out_bytes * static_cast<std::uint64_t>(batch)));
    if (dtype_ == Dtype::kFloat32) r = std::min<std::int64_t>(r, 65536);
    if (r >= 256) r = r / 256 * 256;
    return std::max<std::int64_t>(1, std::min(r, rows_));
  }

  template <typename T, bool kL2>
  void batched_m(const float* queries, int batch, int k, Candidate* out, bool export_too) {
    // One graph: the batched search, its overflow flags to the host [, the export — correct
    // unless a pool overflowed: then queued again below].
    replay(queries, out, k, batch, export_too, [&] {
      enqueue_batched<T, kL2, GemmOut<T>>(queries, batch, k, out);
      CHECK_CUDA(cudaMemcpyAsync(host_overflow_, overflow_, static_cast<std::size_t>(batch) * 4,
                                 cudaMemcpyDeviceToHost, stream_.s));
      if (export_too) export_ops(out, batch, k);
    });
    if (export_too) note_export(batch, k);
    CHECK_CUDA(cudaStreamSynchronize(stream_.s));
    bool redo = false;
    for (int q = 0; q < batch; ++q) {
      if (host_overflow_[q] == 0) continue;
      ++counters_.batched_fallbacks;  // a pool overflowed (adversarial row order): the exact batch-1 path, same bits
      enqueue1_m<T, kL2>(queries + static_cast<std::int64_t>(q) * dim_, k, out + static_cast<std::int64_t>(q) * k);
      redo = true;
    }
    if (export_too && redo) export_ops(out, batch, k);  // counted once, by note_export above
  }

  /// The batched path's device work (capturable: no host synchronisation).
  template <typename T, bool kL2, typename OutT>
  void enqueue_batched(const float* queries, int batch, int k, Candidate* out) {
    using namespace cuda_detail;
    const std::int64_t pcap = pool_cap(limits_);
    const std::uint32_t uk = static_cast<std::uint32_t>(k);
    CHECK_CUDA(cudaMemsetAsync(counts_, 0, static_cast<std::size_t>(batch) * 4, stream_.s));
    CHECK_CUDA(cudaMemsetAsync(overflow_, 0, static_cast<std::size_t>(batch) * 4, stream_.s));
    prep_kernel<T, OutT><<<batch, kPrepThreads, 0, stream_.s>>>(queries, dim_, dpad_, qpad_, static_cast<T*>(qhat_),
                                                          qinfo_, max_sq_, kL2 ? 1 : 0, 1);
    CHECK_CUDA_LAUNCH();
    const std::int64_t R = chunk_rows(batch, sizeof(OutT));
    const float one = 1.0f, zero = 0.0f;
    const cudaDataType_t ty = std::is_same<T, float>::value ? CUDA_R_32F
                              : std::is_same<T, __half>::value ? CUDA_R_16F
                                                                : CUDA_R_16BF;
    const cudaDataType_t out_ty = std::is_same<OutT, __half>::value ? CUDA_R_16F : CUDA_R_32F;
    const cublasComputeType_t ct = std::is_same<T, float>::value ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    // Two streams: the GEMM of chunk c + 1 (tensor cores, stream_) overlaps the filter of chunk c
    // (memory, side_); the GEMM output alternates between two buffers.
    OutT* sbuf[2] = {reinterpret_cast<OutT*>(scores_),
                     reinterpret_cast<OutT*>(reinterpret_cast<char*>(scores_) + plan_.sbuf_bytes)};
    const std::int64_t R0 = std::min<std::int64_t>(R, kFirstChunkRows);  // seeds the thresholds
    // Compact (and raise the threshold) once a pool holds 2k entries: the first chunk's threshold
    // (the k-th of 8,192 rows) lets ~k · R / 8192 rows of each later chunk through, and waiting
    // for pool_cap / 4 entries kept it that loose for several chunks (bench/NOTES.md, "Batched
    // filter": a trigger of pool_cap / 4 after the first 8 chunks measured 3 % slower).
    const std::uint32_t trigger = static_cast<std::uint32_t>(
        std::min<std::int64_t>(pcap / kPoolTriggerDiv, std::max<std::int64_t>(2LL * k, 256)));
    int last = 0;
    // Chunk c ≥ 1 has at most G times as many rows as came before it (from R0 up to R): a
    // threshold from n rows lets about k · rows_c / n ≤ k · G rows of the next chunk through, so
    // the early chunks cannot flood the pools (k · G ≤ pool_cap / 4), and small batches still get
    // long GEMMs soon. G = 8 where the pool allows (was 1, i.e. doubling: 1M B = 64 dev 656 → 626
    // µs, B = 8 542 → 509 µs; bench/NOTES.md, "Seventh session").
    const std::int64_t G = std::min<std::int64_t>(kMaxChunkGrowth, std::max<std::int64_t>(1, pcap / (4LL * k)));
    for (std::int64_t r0 = 0, c = 0; r0 < rows_; ++c) {
      const int rc = static_cast<int>(std::min({c == 0 ? R0 : std::min(R, G * r0), rows_ - r0}));
      const int b = static_cast<int>(c & 1);
      if (c >= 2) CHECK_CUDA(cudaStreamWaitEvent(stream_.s, ev_filtered_[b].e, 0));
      // sbuf[b][q * rc + i] = Σ_d qhat[q, d] · shard[r0 + i, d]   (column-major [rc, batch])
      CHECK_CUBLAS(cublasGemmEx(cublas_.h, CUBLAS_OP_T, CUBLAS_OP_N, rc, batch, static_cast<int>(dpad_), &one,
                                static_cast<const T*>(shard_) + r0 * dpad_, ty, static_cast<int>(dpad_), qhat_, ty,
                                static_cast<int>(dpad_), &zero, sbuf[b], out_ty, rc, ct, CUBLAS_GEMM_DEFAULT));
      CHECK_CUDA(cudaEventRecord(ev_scored_[b].e, stream_.s));
      CHECK_CUDA(cudaStreamWaitEvent(side_.s, ev_scored_[b].e, 0));
      Approx<OutT> ap{sbuf[b], rc, row_sq_, r0, kL2};
      if (c == 0) {
        chunk0_kernel<<<batch, kSelThreads, 0, side_.s>>>(ap, rc, qinfo_, uk, pool_, pcap, counts_, thr_, overflow_);
      } else {
        constexpr int per_block = FilterShape<OutT>::kPerBlock;
        const dim3 grid(static_cast<unsigned>((rc + per_block - 1) / per_block), static_cast<unsigned>(batch));
        filter_kernel<<<grid, kFilterThreads, 0, side_.s>>>(ap, rc, qinfo_, thr_, pool_, pcap, counts_, overflow_);
        CHECK_CUDA_LAUNCH();
        // Raise the thresholds after each of the first chunks, then every kCompactEvery chunks
        // (the pool holds pool_cap − trigger survivors in between; beyond: overflow → fallback).
        if (c < 8 || c % kCompactEvery == 0 || rc > 65536)  // long chunks: after each
          compact_kernel<<<batch, kSelThreads, 0, side_.s>>>(qinfo_, uk, pool_, pcap, counts_, thr_, trigger);
      }
      CHECK_CUDA_LAUNCH();
      CHECK_CUDA(cudaEventRecord(ev_filtered_[b].e, side_.s));
      last = b;
      r0 += rc;
    }
    CHECK_CUDA(cudaStreamWaitEvent(stream_.s, ev_filtered_[last].e, 0));
    const int nvec = static_cast<int>(dpad_ / VecTraits<T>::kElems);
    const std::size_t smem = static_cast<std::size_t>(cap_) * (sizeof(float) + sizeof(std::int64_t));
    final_batched_kernel<T, kL2><<<batch, kSelThreads, smem, stream_.s>>>(
        static_cast<const T*>(shard_), nvec, qpad_, qinfo_, uk, pool_, pcap, counts_, overflow_, ids_, cap_, out, k);
    CHECK_CUDA_LAUNCH();
  }

  struct EventHolder {
    cudaEvent_t e = nullptr;
    ~EventHolder() {
      if (e) (void)cudaEventDestroy(e);
    }
  };

  struct CublasHolder {
    cublasHandle_t h = nullptr;
    ~CublasHolder() {
      if (h) (void)cublasDestroy(h);
    }
  };

  int device_;
  std::string device_name_;
  int sms_ = 1;
  Metric metric_;
  Dtype dtype_;
  std::int64_t rows_, dim_, dpad_ = 0;
  EngineLimits limits_;
  Plan plan_;
  int cap_ = 0;
  double max_sq_ = 0.0;
  int scan_grid_cache_ = 0;
  std::uint64_t pinned_queries_off_ = 0, pinned_ids_off_ = 0, pinned_scores_off_ = 0;
  int select_grid_ = 0;  // all resident: select1_kernel's grid barrier needs it
  bool use_graphs_ = true;
  std::map<std::tuple<const float*, Candidate*, int, int, bool>, cudaGraphExec_t> graphs_;
  // Declaration order = reverse destruction order: cuBLAS and the stream go before the memory
  // their work used is freed.
  DeviceBuffer arena_;
  PinnedBuffer pinned_;
  std::list<PinnedBuffer> staging_;  // alloc_host_staging (a list: elements never move)
  StreamHolder stream_;
  StreamHolder side_;  // the batched path's filter stream
  EventHolder ev_scored_[2], ev_filtered_[2];
  // streamed upload (ShardInput::streamed): two pinned blocks used in turn, their copy events
  bool streaming_ = false;
  PinnedBuffer up_buf_[2];
  EventHolder up_ev_[2];
  std::int64_t up_cap_rows_ = 0, up_rows_done_ = 0, stream_first_row_ = 0;
  int up_next_ = 0;
  const std::int64_t* stream_ids_ = nullptr;
  CublasHolder cublas_;
  void* shard_ = nullptr;
  std::int64_t* ids_ = nullptr;
  float* row_sq_ = nullptr;
  float* queries_ = nullptr;
  float* qpad_ = nullptr;
  void* qhat_ = nullptr;
  QueryInfo* qinfo_ = nullptr;
  Candidate* local_ = nullptr;
  Candidate* gathered_ = nullptr;
  Candidate* merged_ = nullptr;
  unsigned long long* status_ = nullptr;
  std::int64_t* out_ids_ = nullptr;  // pinned export buffers, as the device addresses them
  float* out_scores_ = nullptr;
  std::uint32_t* hists_ = nullptr;
  std::uint32_t* counts_ = nullptr;
  std::uint32_t* overflow_ = nullptr;
  float* thr_ = nullptr;
  Batch1State* state_ = nullptr;
  std::uint32_t* scan_dir_ = nullptr;  // status_[kStatusScanDir], or null: scans always forward
  bool scan_two_rows_ = false;         // SHARDTOPK_SCAN_ROWS=2
  PoolEntry* pool_ = nullptr;
  float* scores_ = nullptr;
  void* cublas_ws_ = nullptr;
  unsigned long long* host_status_ = nullptr;
  std::uint32_t* host_overflow_ = nullptr;
  TransferCounters counters_;
};

}  // namespace

// ---------------------------------------------------------------- public functions

std::unique_ptr<Engine> make_cuda_engine(const ShardInput& shard, Metric metric, Dtype dtype, int device,
                                         const EngineLimits& limits) {
  return std::make_unique<CudaEngine>(shard, metric, dtype, device, limits);
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no device: not an error for a query
    return 0;
  }
  return n;
}

bool cuda_available() { return cuda_device_count() > 0; }

bool built_with_cuda() { return true; }

std::uint64_t cuda_engine_device_bytes(std::int64_t rows, std::int64_t dim, Dtype dtype, const EngineLimits& limits) {
  return make_plan(rows, dim, dtype, limits).total;
}

}  // namespace shardtopk
