#pragma once
// Query preparation on the device (host launchers): validation and cosine normalisation of a
// batch, and the batched path's per-query inputs (padded exact query, rounded GEMM query, Δ).

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/kernels/workspace_types.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk::cuda_detail {

/// validate_queries' status word when every query is valid.
constexpr unsigned long long kQueriesOk = ~0ull;

/// The first rejected query of a batch, decoded from a status word other than kQueriesOk.
struct QueryProblem {
  std::int64_t query = 0;   ///< position in the batch
  std::int64_t column = 0;  ///< the first non-finite column (0 for a zero norm)
  bool zero_norm = false;   ///< true: zero norm (cosine); false: a non-finite value at `column`
};
QueryProblem decode_query_status(unsigned long long status);

/// Validates queries [batch, dim] (device, float32, row-major) and, when `normalize` (cosine),
/// L2-normalises them in place with the arithmetic of normalize_rows() (float64 sum of squares
/// in column order, x ← float(x · (1 / norm))), bit for bit. *status (device, one word) ←
/// kQueriesOk, or the key of the first bad query (and within it the first bad column), which
/// decode_query_status() reads; a query with a non-finite value is left untouched. One block of
/// 256 threads per query. On `stream`, returns at once. batch ≥ 1.
void validate_queries(float* queries, int batch, std::int64_t dim, bool normalize, unsigned long long* status,
                      cudaStream_t stream);

/// validate_queries() for the stream-ordered path, which cannot wait to throw: invalid[q] ← 1
/// for a query with a non-finite value (or, with `normalize`, a zero norm), and its values ← 0;
/// invalid[q] ← 0 and (cosine) the query normalised for the others. On `stream`, returns at once.
void validate_queries_marking(float* queries, int batch, std::int64_t dim, bool normalize, std::uint8_t* invalid,
                              cudaStream_t stream);

/// The batched path's per-query inputs for queries [batch, dim] (device, float32, validated):
/// qpad [batch, dpad] float32, the exact query zero-padded to dpad (the re-scoring's input);
/// qhat [batch, dpad] the GEMM's query in the storage type `dtype` (float32 storage: rounded to
/// TF32; 16-bit types: scaled by a power of two so that no GEMM output can overflow, then
/// rounded); qinfo [batch]: Δ ≥ |approximate − exact score| for every row of a shard whose
/// largest stored ‖x‖² is `max_sq` (docs/EXACTNESS.md), the scale, ‖q‖². `l2`: the metric is
/// l2 (Δ covers the squared distance's extra terms). One block of 256 threads per query. On
/// `stream`, returns at once (capturable). batch ≥ 1, dpad a multiple of 16 bytes of `dtype`.
void prepare_batched_queries(const float* queries, int batch, std::int64_t dim, std::int64_t dpad, Dtype dtype,
                             bool l2, double max_sq, float* qpad, void* qhat, QueryInfo* qinfo, cudaStream_t stream);

/// dst [n, row_bytes] ← rows qmap[0 .. n) of src [*, row_bytes] (device; row_bytes a multiple of
/// 16): the GEMM queries of the part of a batch that a chunk scores. On `stream`, returns at once.
void gather_query_rows(const void* src, std::size_t row_bytes, const std::int32_t* qmap, int n, void* dst,
                       cudaStream_t stream);

}  // namespace shardtopk::cuda_detail
