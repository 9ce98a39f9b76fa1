// The final answer's split into ids and reported scores, one thread per candidate.

#include "engine/cuda/kernels/split.hpp"

#include "common/cuda_check.cuh"

namespace shardtopk::cuda_detail {
namespace {

/// ids[i] = list[i].id, scores[i] = the reported score of list[i]. One thread per element.
__global__ void split_results_kernel(const Candidate* __restrict__ list, std::int64_t n, bool l2,
                                     std::int64_t* __restrict__ ids, float* __restrict__ scores) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const Candidate c = list[i];
  ids[i] = c.id;
  scores[i] = l2 ? -c.score : c.score;
}

}  // namespace

void split_results(const Candidate* list, std::int64_t n, bool l2, std::int64_t* ids, float* scores,
                   cudaStream_t stream) {
  if (n == 0) return;
  split_results_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(list, n, l2, ids, scores);
  CHECK_CUDA_LAUNCH();
}

}  // namespace shardtopk::cuda_detail
