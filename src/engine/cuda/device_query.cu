// Device queries that need no engine (used by `shardtopk plan` and backend selection).
#include <cuda_runtime.h>

#include "shardtopk/engine.hpp"

namespace shardtopk {

bool cuda_device_memory(int device, std::uint64_t* free_bytes, std::uint64_t* total_bytes) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || device < 0 || device >= n) {
    cudaGetLastError();
    return false;
  }
  int prev = 0;
  cudaGetDevice(&prev);
  if (cudaSetDevice(device) != cudaSuccess) return false;
  size_t f = 0, t = 0;
  const bool ok = cudaMemGetInfo(&f, &t) == cudaSuccess;
  cudaSetDevice(prev);
  if (ok) {
    *free_bytes = f;
    *total_bytes = t;
  }
  return ok;
}

}  // namespace shardtopk
