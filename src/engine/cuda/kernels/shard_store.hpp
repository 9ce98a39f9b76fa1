#pragma once
// Building the resident shard on the device (host launchers): float32 rows → storage rows
// padded to 16-byte chunks (a block of rows, or a list of slots for updates), rows generated on
// the device, cosine normalisation of staged rows, row norms, global ids.
//
// Storage layout (what every scoring kernel reads): shard [rows, dpad] of the storage type
// (float32, float16 or bfloat16), row-major, dpad = dim rounded up to 16 bytes of that type,
// the padding columns zero. All launchers run on `stream` and return at once.

#include <cuda_runtime.h>

#include <cstdint>

#include "shardtopk/types.hpp"

namespace shardtopk::cuda_detail {

/// ids [n] (device) ← first, first + 1, …
void fill_ids(std::int64_t* ids, std::int64_t n, std::int64_t first, cudaStream_t stream);

/// Converts float32 rows src [m, dim] (device) into shard rows row0 … row0 + m − 1 of `shard`
/// ([rows, dpad], storage `dtype`, rounded to nearest even; the padding columns are left as
/// they are: zero them once before). *status (device) ← min(*status, (row0 + r) · dim + c) for
/// every stored value that is not finite (float16/bfloat16 overflow); initialise it to ~0.
/// m ≤ 0: nothing.
void store_rows(const float* src, std::int64_t m, std::int64_t dim, Dtype dtype, void* shard, std::int64_t dpad,
                std::int64_t row0, unsigned long long* status, cudaStream_t stream);

/// store_rows into a list of slots: staged row r of src [m, dim] (float32, device) into shard
/// row slots[r] of `shard` ([rows, dpad], storage `dtype`), with store_rows' arithmetic (one
/// kernel body: the same bits as store_rows of that row at row0 = slots[r]); the padding columns
/// are left as they are. slots [m] (device): distinct rows in [0, rows), any order (duplicates:
/// unspecified which row lands). *status (device) ← min(*status, slots[r] · dim + c) for every
/// stored value that is not finite (float16/bfloat16 overflow); initialise it to ~0. m ≤ 0: nothing.
void store_rows_at(const float* src, std::int64_t m, std::int64_t dim, Dtype dtype, void* shard, std::int64_t dpad,
                   const std::int64_t* slots, unsigned long long* status, cudaStream_t stream);

/// ids [rows] (device) at slots [m] (device) ← src [m] (device): ids[slots[i]] = src[i].
void scatter_ids(const std::int64_t* src, std::int64_t m, const std::int64_t* slots, std::int64_t* ids,
                 cudaStream_t stream);

/// Generated float32 rows (shardtopk/generator.hpp) into dst [m, dim] (device): row r holds
/// generated_value(seed, first_row + r, c).
void generate_rows_f32(float* dst, std::int64_t m, std::int64_t dim, std::uint64_t seed, std::int64_t first_row,
                       cudaStream_t stream);

/// Generated rows straight into storage: shard rows 0 … rows − 1 ([rows, dpad], storage
/// `dtype`) ← generated_value(seed, first_row + r, c) rounded to the storage type, in launches
/// of at most 2^28 elements. For metrics that do not normalise (one write of the shard).
void generate_store_rows(Dtype dtype, void* shard, std::int64_t rows, std::int64_t dim, std::int64_t dpad,
                         std::uint64_t seed, std::int64_t first_row, cudaStream_t stream);

/// L2-normalises float32 rows x [m, dim] (device) in place with normalize_rows()' arithmetic
/// (float64 sum in column order, x ← float(x · (1 / norm))), bit for bit. *status (device) ←
/// min(*status, first_row + r) for every row of zero norm (left unchanged); initialise to ~0.
void normalize_rows_f32(float* x, std::int64_t m, std::int64_t dim, std::int64_t first_row,
                        unsigned long long* status, cudaStream_t stream);

/// ‖x‖² of the stored rows of shard [rows, dpad] (storage `dtype`), in float64 (a warp per
/// row): row_sq [rows] (device, float; nullptr: not written) and *max_sq_bits (device) ←
/// max(*max_sq_bits, the bits of the largest ‖x‖² as a double; non-negative doubles order like
/// their bits); initialise it to 0. rows ≤ 0: nothing.
void row_norms(Dtype dtype, const void* shard, std::int64_t rows, std::int64_t dpad, float* row_sq,
               unsigned long long* max_sq_bits, cudaStream_t stream);

/// row_norms of the listed rows only: slots [m] (device, distinct rows of shard [rows, dpad],
/// any order) → row_sq[slots[r]] (device [rows], float; nullptr: not written) and *max_sq_bits
/// as row_norms (the same kernel body: a row's ‖x‖² has the same bits either way). m ≤ 0: nothing.
void row_norms_at(Dtype dtype, const void* shard, std::int64_t m, std::int64_t dpad, const std::int64_t* slots,
                  float* row_sq, unsigned long long* max_sq_bits, cudaStream_t stream);

}  // namespace shardtopk::cuda_detail
