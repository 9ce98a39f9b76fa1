#pragma once
// The shard's rows from IEEE binary16 bit patterns (a streamed float16 corpus, half the bytes of
// float32 on the way to the device): each value converted exactly to float32, then to the storage
// type as store_rows (shard_store.hpp) converts a float32 value, padding untouched.

#include <cuda_runtime.h>

#include <cstdint>

#include "shardtopk/types.hpp"

namespace shardtopk::cuda_detail {

/// Rows staged as IEEE binary16 bit patterns: bits [rows, dim], row-major, device memory.
struct Float16BitsView {
  const std::uint16_t* bits = nullptr;
  std::int64_t rows = 0;
  std::int64_t dim = 0;
};

/// The resident shard (shard_store.hpp's layout): data [slots, dpad] of storage `dtype`,
/// row-major, device memory.
struct ShardStorageView {
  void* data = nullptr;
  Dtype dtype = Dtype::kFloat32;
  std::int64_t dpad = 0;
};

/// src's row r → shard row row0 + r, columns [0, src.dim): value float(bits) rounded to the
/// storage type, the bits store_rows gives for that float32 value (float16 → float32 is exact,
/// so float16 storage holds the same bits back; ±0 and subnormals kept). The padding columns
/// are left as they are (zero them once before). *status (device) ← min(*status,
/// (row0 + r) · dim + c) for every pattern whose exponent bits are all ones (±inf, NaN):
/// store_rows' flat index, for the same values; initialise it to ~0. Ordered on `stream`,
/// returns at once. src.rows ≤ 0: nothing.
void store_f16_bits_rows(const Float16BitsView& src, const ShardStorageView& shard, std::int64_t row0,
                         unsigned long long* status, cudaStream_t stream);

}  // namespace shardtopk::cuda_detail
