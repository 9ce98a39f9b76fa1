// The largest row norm of staged rows (load_norms.hpp).

#include "engine/cuda/kernels/load_norms.hpp"

#include <cuda_fp16.h>

#include "core/cuda_check.cuh"

namespace shardtopk::cuda_detail {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float value_at(const float* rows, std::int64_t i) { return rows[i]; }
__device__ __forceinline__ float value_at(const std::uint16_t* rows, std::int64_t i) {
  return __half2float(__ushort_as_half(rows[i]));  // exact
}

/// Whether (na, ra) comes before (nb, rb): the larger norm, then the smaller row; no row last.
__device__ __forceinline__ bool before(double na, std::int64_t ra, double nb, std::int64_t rb) {
  if (ra < 0) return false;
  if (rb < 0) return true;
  return na > nb || (na == nb && ra < rb);
}

/// One thread per row (grid-stride, rows in increasing order per thread): row_norm's four chains
/// of float64 adds; a row's 3 KB are read by one thread, from L2 after the first touch. Shape in
/// mind: a staged block of up to 65,536 rows of 768 values, next to a host-to-device copy of
/// the same bytes at about a hundredth of the device's read rate.
template <typename T>
__global__ void __launch_bounds__(kThreads) staged_norm_max_kernel(const T* __restrict__ rows, std::int64_t m,
                                                                   std::int64_t dim, std::int64_t row0,
                                                                   RowNormPart* __restrict__ parts) {
  double best = 0.0;
  std::int64_t best_row = -1;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; r < m; r += step) {
    const T* x = rows + r * dim;
    double s[4] = {0.0, 0.0, 0.0, 0.0};
    std::int64_t d = 0;
    for (; d + 4 <= dim; d += 4)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const double v = static_cast<double>(value_at(x, d + j));
        s[j] = __dadd_rn(s[j], __dmul_rn(v, v));
      }
    for (int j = 0; d < dim; ++d, ++j) {
      const double v = static_cast<double>(value_at(x, d));
      s[j] = __dadd_rn(s[j], __dmul_rn(v, v));
    }
    const double n = __dsqrt_rn(__dadd_rn(__dadd_rn(s[0], s[1]), __dadd_rn(s[2], s[3])));
    if (before(n, row0 + r, best, best_row)) {
      best = n;
      best_row = row0 + r;
    }
  }
  __shared__ double sn[kThreads];
  __shared__ std::int64_t sr[kThreads];
  sn[threadIdx.x] = best;
  sr[threadIdx.x] = best_row;
  __syncthreads();
  for (int h = kThreads / 2; h > 0; h /= 2) {
    if (threadIdx.x < h && before(sn[threadIdx.x + h], sr[threadIdx.x + h], sn[threadIdx.x], sr[threadIdx.x])) {
      sn[threadIdx.x] = sn[threadIdx.x + h];
      sr[threadIdx.x] = sr[threadIdx.x + h];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    RowNormPart p = parts[blockIdx.x];  // this block's slot: written by this block only, launches in stream order
    if (before(sn[0], sr[0], p.norm, p.row)) parts[blockIdx.x] = RowNormPart{sn[0], sr[0]};
  }
}

}  // namespace

void staged_norm_max(const void* rows, RowFormat format, std::int64_t m, std::int64_t dim, std::int64_t row0,
                     RowNormPart* parts, cudaStream_t stream) {
  if (m <= 0) return;
  if (format == RowFormat::kFloat16Bits)
    staged_norm_max_kernel<<<kLoadNormBlocks, kThreads, 0, stream>>>(static_cast<const std::uint16_t*>(rows), m, dim,
                                                                     row0, parts);
  else
    staged_norm_max_kernel<<<kLoadNormBlocks, kThreads, 0, stream>>>(static_cast<const float*>(rows), m, dim, row0,
                                                                     parts);
  CHECK_CUDA_LAUNCH();
}

}  // namespace shardtopk::cuda_detail
