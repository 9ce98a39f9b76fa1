// Device queries that need no engine (`shardtopk plan`, backend selection).
#include <cuda_runtime.h>

#include "shardtopk/engine.hpp"

namespace shardtopk {

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

bool cuda_device_memory(int device, std::uint64_t* free_bytes, std::uint64_t* total_bytes) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || device < 0 || device >= n) {
    (void)cudaGetLastError();
    return false;
  }
  int prev = 0;
  (void)cudaGetDevice(&prev);
  if (cudaSetDevice(device) != cudaSuccess) return false;
  size_t f = 0, t = 0;
  const bool ok = cudaMemGetInfo(&f, &t) == cudaSuccess;
  (void)cudaSetDevice(prev);
  if (ok) {
    *free_bytes = f;
    *total_bytes = t;
  }
  return ok;
}

}  // namespace shardtopk
