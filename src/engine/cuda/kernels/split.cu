// The final answer's split into ids and reported scores, one thread per candidate.

#include "engine/cuda/kernels/split.hpp"

#include <algorithm>

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/workspace_types.hpp"

namespace shardtopk::cuda_detail {
namespace {

/// ids[i] = list[i].id, scores[i] = the reported score of list[i] (l2: the distance), as the
/// final sorts' direct export writes them (ExportTarget::write).
__device__ __forceinline__ void split_one(const Candidate* __restrict__ list, std::int64_t i, bool l2,
                                          std::int64_t* __restrict__ ids, float* __restrict__ scores) {
  ExportTarget{ids, scores, l2}.write(i, list[i]);
}

/// split_one of every element, one thread each.
__global__ void split_results_kernel(const Candidate* __restrict__ list, std::int64_t n, bool l2,
                                     std::int64_t* __restrict__ ids, float* __restrict__ scores) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  split_one(list, i, l2, ids, scores);
}

/// split_results_kernel plus the first `count` threads copying one status slot each.
__global__ void split_results_with_status_kernel(const Candidate* __restrict__ list, std::int64_t n, bool l2,
                                                 std::int64_t* __restrict__ ids, float* __restrict__ scores,
                                                 const Candidate* __restrict__ status_src, std::int64_t status_stride,
                                                 int count, Candidate* __restrict__ status_dst) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) status_dst[i] = status_src[i * status_stride];
  if (i >= n) return;
  split_one(list, i, l2, ids, scores);
}

/// split_results_kernel with invalid queries' rows marked (ids −1, scores NaN).
__global__ void split_results_marked_kernel(const Candidate* __restrict__ list, std::int64_t n, bool l2,
                                            std::int64_t* __restrict__ ids, float* __restrict__ scores,
                                            const std::uint8_t* __restrict__ invalid, int k) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (invalid[i / k]) {
    ids[i] = kPadId;  // reserved: never a row's id
    scores[i] = __int_as_float(0x7fc00000);
    return;
  }
  split_one(list, i, l2, ids, scores);
}

}  // namespace

void split_results_marked(const Candidate* list, std::int64_t n, bool l2, std::int64_t* ids, float* scores,
                          const std::uint8_t* invalid, int k, cudaStream_t stream) {
  if (n == 0) return;
  split_results_marked_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(list, n, l2, ids, scores,
                                                                                        invalid, k);
  CHECK_CUDA_LAUNCH();
}

void split_results_with_status(const Candidate* list, std::int64_t n, bool l2, std::int64_t* ids, float* scores,
                               const Candidate* status_src, std::int64_t status_stride, int status_count,
                               Candidate* status_dst, cudaStream_t stream) {
  const std::int64_t threads = std::max<std::int64_t>(n, status_count);
  if (threads == 0) return;
  split_results_with_status_kernel<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(
      list, n, l2, ids, scores, status_src, status_stride, status_count, status_dst);
  CHECK_CUDA_LAUNCH();
}

void split_results(const Candidate* list, std::int64_t n, bool l2, std::int64_t* ids, float* scores,
                   cudaStream_t stream) {
  if (n == 0) return;
  split_results_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(list, n, l2, ids, scores);
  CHECK_CUDA_LAUNCH();
}

}  // namespace shardtopk::cuda_detail
