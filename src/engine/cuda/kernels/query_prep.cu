// Query preparation on the device: validation and cosine normalisation (every path), and the
// batched path's per-query inputs with the filter's error bound Δ (docs/EXACTNESS.md).

#include "engine/cuda/kernels/query_prep.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/storage.cuh"

namespace shardtopk::cuda_detail {
namespace {

constexpr int kPrepThreads = 256;

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
/// A query with a non-finite value is left untouched.
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
    const double norm = norm_f64(x, dim);
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

/// prepare_queries_kernel's checks and arithmetic, marking instead of reporting: a rejected
/// query is zeroed and flagged, the others normalised (cosine). Block per query.
__global__ void __launch_bounds__(kPrepThreads)
    mark_queries_kernel(float* __restrict__ queries, std::int64_t dim, int normalize,
                        std::uint8_t* __restrict__ invalid) {
  __shared__ int bad;
  __shared__ double inv;
  const std::int64_t q = blockIdx.x;
  float* x = queries + q * dim;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  for (std::int64_t d = threadIdx.x; d < dim; d += blockDim.x)
    if (!isfinite(x[d])) bad = 1;
  __syncthreads();
  if (!bad && normalize && threadIdx.x == 0) {
    const double norm = norm_f64(x, dim);
    if (!(norm > 0.0)) {
      bad = 1;
    } else {
      inv = __ddiv_rn(1.0, norm);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) invalid[q] = bad ? 1 : 0;
  if (bad) {
    for (std::int64_t d = threadIdx.x; d < dim; d += blockDim.x) x[d] = 0.0f;
    return;
  }
  if (!normalize) return;
  for (std::int64_t d = threadIdx.x; d < dim; d += blockDim.x)
    x[d] = __double2float_rn(__dmul_rn(static_cast<double>(x[d]), inv));
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

}  // namespace

QueryProblem decode_query_status(unsigned long long st) {
  QueryProblem p;
  p.query = static_cast<std::int64_t>(st >> 40);
  p.column = static_cast<std::int64_t>((st >> 1) & ((1ull << 39) - 1));
  p.zero_norm = (st & 1) == 1;
  return p;
}

void validate_queries_marking(float* queries, int batch, std::int64_t dim, bool normalize, std::uint8_t* invalid,
                              cudaStream_t stream) {
  if (batch <= 0) return;
  mark_queries_kernel<<<batch, kPrepThreads, 0, stream>>>(queries, dim, normalize ? 1 : 0, invalid);
  CHECK_CUDA_LAUNCH();
}

void validate_queries(float* queries, int batch, std::int64_t dim, bool normalize, unsigned long long* status,
                      cudaStream_t stream) {
  CHECK_CUDA(cudaMemsetAsync(status, 0xFF, sizeof(unsigned long long), stream));
  prepare_queries_kernel<<<batch, kPrepThreads, 0, stream>>>(queries, dim, normalize ? 1 : 0, status);
  CHECK_CUDA_LAUNCH();
}

void prepare_batched_queries(const float* queries, int batch, std::int64_t dim, std::int64_t dpad, Dtype dtype,
                             bool l2, double max_sq, float* qpad, void* qhat, QueryInfo* qinfo, cudaStream_t stream) {
  with_storage_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    prep_kernel<T, GemmOut<T>><<<batch, kPrepThreads, 0, stream>>>(queries, dim, dpad, qpad, static_cast<T*>(qhat),
                                                                    qinfo, max_sq, l2 ? 1 : 0, 1);
  });
  CHECK_CUDA_LAUNCH();
}

namespace {

__global__ void gather_rows_kernel(const uint4* __restrict__ src, std::int64_t row_vecs,
                                   const std::int32_t* __restrict__ qmap, uint4* __restrict__ dst) {
  const uint4* from = src + static_cast<std::int64_t>(qmap[blockIdx.x]) * row_vecs;
  uint4* to = dst + static_cast<std::int64_t>(blockIdx.x) * row_vecs;
  for (std::int64_t i = threadIdx.x; i < row_vecs; i += blockDim.x) to[i] = from[i];
}

}  // namespace

void gather_query_rows(const void* src, std::size_t row_bytes, const std::int32_t* qmap, int n, void* dst,
                       cudaStream_t stream) {
  if (n <= 0) return;
  gather_rows_kernel<<<n, 128, 0, stream>>>(static_cast<const uint4*>(src), static_cast<std::int64_t>(row_bytes / 16),
                                            qmap, static_cast<uint4*>(dst));
  CHECK_CUDA_LAUNCH();
}

}  // namespace shardtopk::cuda_detail
