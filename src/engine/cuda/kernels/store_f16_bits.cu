// Binary16 bit patterns into the shard's storage rows, with the non-finite check.

#include "engine/cuda/kernels/store_f16_bits.hpp"

#include <cuda_fp16.h>

#include <algorithm>

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/storage.cuh"

namespace shardtopk::cuda_detail {
namespace {

constexpr int kThreads = 128;

/// Row r of bits [m, dim] → shard row row0 + r (storage T, dpad columns; padding untouched):
/// blocks stride over the rows (y) and across a row (x), so that a warp reads and writes
/// consecutive columns and no index is divided. A pattern with all exponent bits set (±inf,
/// NaN) puts its flat index (row0 + r) · dim + c into *status (the smallest wins). Shape in
/// mind: a streamed block of 65,536 rows of 768 (2 + sizeof(T) bytes a value through device
/// memory, a small fraction of the time of the block's host-to-device copy).
template <typename T>
__global__ void store_f16_bits_kernel(const std::uint16_t* __restrict__ bits, std::int64_t m, std::int64_t dim,
                                      T* __restrict__ shard, std::int64_t dpad, std::int64_t row0,
                                      unsigned long long* status) {
  const std::int64_t c0 = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t cstep = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t r = blockIdx.y; r < m; r += gridDim.y) {
    const std::uint16_t* in = bits + r * dim;
    T* out = shard + (row0 + r) * dpad;
    for (std::int64_t c = c0; c < dim; c += cstep) {
      const std::uint16_t h = in[c];
      out[c] = storage_from_float<T>(__half2float(__ushort_as_half(h)));
      if ((h & 0x7C00u) == 0x7C00u) atomicMin(status, static_cast<unsigned long long>((row0 + r) * dim + c));
    }
  }
}

}  // namespace

void store_f16_bits_rows(const Float16BitsView& src, const ShardStorageView& shard, std::int64_t row0,
                         unsigned long long* status, cudaStream_t stream) {
  if (src.rows <= 0 || src.dim <= 0) return;
  const dim3 grid(static_cast<unsigned>(std::min<std::int64_t>((src.dim + kThreads - 1) / kThreads, 64)),
                  static_cast<unsigned>(std::min<std::int64_t>(src.rows, 65535)));
  with_storage_type(shard.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    store_f16_bits_kernel<T><<<grid, kThreads, 0, stream>>>(src.bits, src.rows, src.dim, static_cast<T*>(shard.data),
                                                            shard.dpad, row0, status);
  });
  CHECK_CUDA_LAUNCH();
}

}  // namespace shardtopk::cuda_detail
