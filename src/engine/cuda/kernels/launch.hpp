#pragma once
// Host helpers shared by the CUDA engine's launchers: grid sizes, kernel attributes, occupancy.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "core/cuda_check.cuh"

namespace shardtopk::cuda_detail {

/// Blocks of `threads` threads for n elements of a grid-stride kernel, at most 65535 × 16.
inline int grid_for(std::int64_t n, int threads) {
  return static_cast<int>(std::min<std::int64_t>((n + threads - 1) / threads, 65535LL * 16));
}

/// Opts kernel `fn` into `bytes` of dynamic shared memory on the current device. Done once per
/// (device, kernel, size): a call asking for no more than an earlier one changes nothing, so an
/// engine never lowers the limit another engine of the process still launches with.
inline void allow_dynamic_smem(const void* fn, std::size_t bytes) {
  static std::mutex mutex;
  static std::map<std::pair<int, const void*>, std::size_t> granted;
  int device = -1;
  CHECK_CUDA(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  std::size_t& have = granted[{device, fn}];
  if (bytes <= have) return;
  CHECK_CUDA(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  have = bytes;
}

/// The blocks of kernel `fn` (`threads` threads, `smem` bytes of dynamic shared memory) that
/// are resident at once on a device of `sms` multiprocessors: a persistent grid.
inline int persistent_grid(const void* fn, int threads, std::size_t smem, int sms) {
  int per_sm = 0;
  CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, threads, smem));
  return std::max(1, per_sm) * sms;
}

}  // namespace shardtopk::cuda_detail
