// Building the resident shard on the device: conversion to the storage type with padding (into
// a block of rows or a list of slots), generated rows, cosine normalisation of staged rows, row
// norms, global ids.

#include "engine/cuda/kernels/shard_store.hpp"

#include <algorithm>

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/launch.hpp"
#include "engine/cuda/kernels/storage.cuh"
#include "shardtopk/generator.hpp"

namespace shardtopk::cuda_detail {
namespace {

/// Where staged row r goes in the shard: a block of consecutive rows (store_rows, row_norms)…
struct BlockRows {
  std::int64_t first;
  __device__ std::int64_t operator()(std::int64_t r) const { return first + r; }
};
/// … or a list of slots (store_rows_at, row_norms_at; device memory, [m]). The kernels below are
/// written once over the row map, so both give the same bits for a row at the same position.
struct ListedRows {
  const std::int64_t* __restrict__ slots;
  __device__ std::int64_t operator()(std::int64_t r) const { return slots[r]; }
};

/// Converts staging rows src [m, dim] (float32) into shard rows rows(0) … rows(m − 1) of
/// shard [·, dpad] (storage T; the padding columns stay zero) and records in *status the first
/// flat index rows(r)·dim + c whose stored value is not finite (float16/bfloat16 overflow).
/// Grid-stride.
template <typename T, typename Rows>
__global__ void convert_pad_kernel(const float* __restrict__ src, std::int64_t m, std::int64_t dim, std::int64_t dpad,
                                   T* __restrict__ shard, Rows rows, unsigned long long* status) {
  const std::int64_t n = m * dim;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / dim, c = i % dim, s = rows(r);
    const T v = storage_from_float<T>(src[i]);
    shard[s * dpad + c] = v;
    if (!isfinite(to_float(v))) atomicMin(status, static_cast<unsigned long long>(s * dim + c));
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
  const double norm = norm_f64(row, dim);
  if (!(norm > 0.0)) {
    atomicMin(status, static_cast<unsigned long long>(first_row + r));
    return;
  }
  const double inv = __ddiv_rn(1.0, norm);
  for (std::int64_t d = 0; d < dim; ++d) row[d] = __double2float_rn(__dmul_rn(static_cast<double>(row[d]), inv));
}

/// ‖x‖² of the m stored rows rows(0) … rows(m − 1) of shard [·, dpad] (warp per row, float64):
/// into row_sq[rows(r)] (float, when given) and the maximum's bits into *max_sq_bits
/// (non-negative doubles order like their bits).
template <typename T, typename Rows>
__global__ void row_norm_kernel(const T* __restrict__ shard, std::int64_t m, std::int64_t dpad, Rows rows,
                                float* __restrict__ row_sq, unsigned long long* max_sq_bits) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x / 32) + (threadIdx.x >> 5); r < m;
       r += warps) {
    const std::int64_t s = rows(r);
    double ss = 0.0;
    for (std::int64_t d = lane; d < dpad; d += 32) {
      const double v = static_cast<double>(to_float(shard[s * dpad + d]));
      ss += v * v;
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xFFFFFFFFu, ss, o);
    if (lane == 0) {
      if (row_sq) row_sq[s] = static_cast<float>(ss);
      atomicMax(max_sq_bits, static_cast<unsigned long long>(__double_as_longlong(ss)));
    }
  }
}

/// ids[slots[i]] ← src[i] for i < m. Grid-stride.
__global__ void scatter_ids_kernel(const std::int64_t* __restrict__ src, std::int64_t m,
                                   const std::int64_t* __restrict__ slots, std::int64_t* __restrict__ ids) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < m;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    ids[slots[i]] = src[i];
}

__global__ void fill_ids_kernel(std::int64_t* __restrict__ ids, std::int64_t n, std::int64_t first) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    ids[i] = first + i;
}

}  // namespace

void fill_ids(std::int64_t* ids, std::int64_t n, std::int64_t first, cudaStream_t stream) {
  fill_ids_kernel<<<grid_for(n, 256), 256, 0, stream>>>(ids, n, first);
  CHECK_CUDA_LAUNCH();
}

void store_rows(const float* src, std::int64_t m, std::int64_t dim, Dtype dtype, void* shard, std::int64_t dpad,
                std::int64_t row0, unsigned long long* status, cudaStream_t stream) {
  if (m <= 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    convert_pad_kernel<T><<<grid_for(m * dim, 256), 256, 0, stream>>>(src, m, dim, dpad, static_cast<T*>(shard),
                                                                        BlockRows{row0}, status);
  });
  CHECK_CUDA_LAUNCH();
}

void store_rows_at(const float* src, std::int64_t m, std::int64_t dim, Dtype dtype, void* shard, std::int64_t dpad,
                   const std::int64_t* slots, unsigned long long* status, cudaStream_t stream) {
  if (m <= 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    convert_pad_kernel<T><<<grid_for(m * dim, 256), 256, 0, stream>>>(src, m, dim, dpad, static_cast<T*>(shard),
                                                                        ListedRows{slots}, status);
  });
  CHECK_CUDA_LAUNCH();
}

void scatter_ids(const std::int64_t* src, std::int64_t m, const std::int64_t* slots, std::int64_t* ids,
                 cudaStream_t stream) {
  if (m <= 0) return;
  scatter_ids_kernel<<<grid_for(m, 256), 256, 0, stream>>>(src, m, slots, ids);
  CHECK_CUDA_LAUNCH();
}

void generate_rows_f32(float* dst, std::int64_t m, std::int64_t dim, std::uint64_t seed, std::int64_t first_row,
                       cudaStream_t stream) {
  generate_kernel<<<grid_for(m * dim, 256), 256, 0, stream>>>(dst, m, dim, seed, first_row);
  CHECK_CUDA_LAUNCH();
}

void generate_store_rows(Dtype dtype, void* shard, std::int64_t rows, std::int64_t dim, std::int64_t dpad,
                         std::uint64_t seed, std::int64_t first_row, cudaStream_t stream) {
  with_storage_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const std::int64_t per = std::max<std::int64_t>(1, (std::int64_t{1} << 28) / dim);  // bounded launches
    for (std::int64_t r0 = 0; r0 < rows; r0 += per) {
      const std::int64_t m = std::min(per, rows - r0);
      generate_store_kernel<T><<<grid_for(m * dim, 256), 256, 0, stream>>>(static_cast<T*>(shard) + r0 * dpad, m, dim,
                                                                            dpad, seed, first_row + r0);
      CHECK_CUDA_LAUNCH();
    }
  });
}

void normalize_rows_f32(float* x, std::int64_t m, std::int64_t dim, std::int64_t first_row,
                        unsigned long long* status, cudaStream_t stream) {
  normalize_kernel<<<grid_for(m, 128), 128, 0, stream>>>(x, m, dim, first_row, status);
  CHECK_CUDA_LAUNCH();
}

void row_norms(Dtype dtype, const void* shard, std::int64_t rows, std::int64_t dpad, float* row_sq,
               unsigned long long* max_sq_bits, cudaStream_t stream) {
  if (rows <= 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    row_norm_kernel<T><<<grid_for(rows * 32, 256), 256, 0, stream>>>(static_cast<const T*>(shard), rows, dpad,
                                                                       BlockRows{0}, row_sq, max_sq_bits);
  });
  CHECK_CUDA_LAUNCH();
}

void row_norms_at(Dtype dtype, const void* shard, std::int64_t m, std::int64_t dpad, const std::int64_t* slots,
                  float* row_sq, unsigned long long* max_sq_bits, cudaStream_t stream) {
  if (m <= 0) return;
  with_storage_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    row_norm_kernel<T><<<grid_for(m * 32, 256), 256, 0, stream>>>(static_cast<const T*>(shard), m, dpad,
                                                                    ListedRows{slots}, row_sq, max_sq_bits);
  });
  CHECK_CUDA_LAUNCH();
}

}  // namespace shardtopk::cuda_detail
