// Padding of candidate lists: a grid-stride fill with pad_candidate().

#include "engine/cuda/kernels/fill.hpp"

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/launch.hpp"

namespace shardtopk::cuda_detail {
namespace {

/// Fills out [n] with pad_candidate(). Grid-stride.
__global__ void fill_pad_kernel(Candidate* __restrict__ out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = pad_candidate();
}

}  // namespace

void fill_pad(Candidate* out, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  fill_pad_kernel<<<grid_for(n, 256), 256, 0, stream>>>(out, n);
  CHECK_CUDA_LAUNCH();
}

}  // namespace shardtopk::cuda_detail
