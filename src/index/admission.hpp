#pragma once
/// @file admission.hpp
/// Score-range admission (docs/EXACTNESS.md "Score range"): float32 scores of finite inputs can overflow
/// (1e20 · 1e20), and an overflowed score (±inf, or NaN from inf − inf) would drop a row or
/// invent an order. Instead of computing such scores, shardtopk refuses them up front, from row
/// norms measured at ingest (float64) and each query's norm:
///
///   inner_product   ‖q‖ · M        ≤ B
///   l2              (‖q‖ + M)²     ≤ B
///   cosine          always admitted (rows and queries are unit vectors: |score| ≤ 1)
///
/// with M = the largest float64 row norm of the corpus (all ranks) and B = kScoreBound =
/// FLT_MAX / 2. Why the factor 2: every intermediate value of a float32 score (each product or
/// squared difference, each lane's running fma sum, the lane tree), in any summation order, is
/// at most Σ_d |q_d x_d| (inner product) or Σ_d (|q_d| + |x_d|)² (l2) times (1 + 2⁻²⁴)^(D+5)
/// (one rounding per fma, per difference, per tree add); by Cauchy–Schwarz and the triangle
/// inequality those sums are ≤ ‖q‖·M and ≤ (‖q‖ + M)². Storage in float16/bfloat16 moves a row
/// norm by at most a factor (1 + 2⁻⁸) (squared for l2). For D ≤ kMaxBoundedDim all those
/// factors together stay below 2, so an admitted query's scores are finite and their order is
/// the order float32 rounding gives, never one invented by an overflow.
///
/// A corpus whose own largest row makes every score unbounded is refused at start-up: under l2
/// (‖q‖ + M)² ≥ M², so M² > B leaves no admissible query (the row is named). Under inner
/// product every corpus admits small enough queries: start-up logs the largest admissible ‖q‖.
#include <cfloat>
#include <cstdint>
#include <string>
#include <vector>

#include "shardtopk/communicator.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk {

/// B: the largest score magnitude a query may be able to reach (FLT_MAX / 2 ≈ 1.7014e38).
constexpr double kScoreBound = static_cast<double>(FLT_MAX) / 2.0;
/// Largest dimension for which the factor 2 in kScoreBound covers accumulation and storage
/// rounding: (1 + 2⁻⁸)² · (1 + 2⁻²⁴)^(D+5) ≤ 2 holds up to D ≈ 11.5 million.
constexpr std::int64_t kMaxBoundedDim = 10'000'000;

/// The largest float64 row norm of a set of rows and the (global) row that has it.
struct NormSummary {
  double max_norm = 0.0;
  std::int64_t row = -1;  ///< global row position of the largest norm (-1: no rows)
};

/// Float64 norms of rows [rows, dim] (raw values, before any cosine normalisation); rows are
/// named first_row + i. Largest wins; equal norms: the smaller row. Split by rows over `threads`
/// threads (the result does not depend on it).
NormSummary shard_norms(const float* data, std::int64_t rows, std::int64_t dim, std::int64_t first_row,
                        int threads = 1);

/// Combine the shards' summaries (e.g. all-gathered from every rank).
NormSummary combine_norms(const std::vector<NormSummary>& parts);

/// Start-up check of one shard: refuses (Error naming `label` and the row, its norm and B) a
/// row that leaves no admissible query (l2: ‖x‖² > B), and a dimension above kMaxBoundedDim.
void check_corpus_norms(Metric m, const NormSummary& shard, std::int64_t dim, const std::string& label);

/// Largest admissible query norm for the corpus: inner product B / M, l2 √B − M, cosine +inf
/// (and +inf when M = 0).
double max_query_norm(Metric m, const NormSummary& corpus);

/// The values of a batch of queries [batch, dim] (raw values, before cosine normalisation), in
/// one branch-free pass over them (per query the largest |value|): every value finite; for
/// cosine, no query of zero norm; for every other metric, no query whose norm could overflow a
/// score. A query passes the range check from the bound ‖q‖ ≤ √dim · max|q_d|; only one that
/// does not gets its float64 norm, which decides. Throws Error naming the first non-finite value
/// (query, column, value; row-major order), else the first zero-norm query (cosine), else the
/// first query over the bound with its float64 norm, the bound it would reach, B, and the
/// corpus row with the largest norm. Admission (search_batch.hpp) runs it once per batch.
void admit_query_values(Metric m, const NormSummary& corpus, const float* queries, int batch, std::int64_t dim);

/// Collective: replaces stats->max_row_norm / max_row_norm_row (this shard's) by the corpus's
/// (all ranks), and logs the admissible query norm on rank 0 (debug).
void allgather_norms(Communicator& comm, Metric m, IngestStats* stats);

}  // namespace shardtopk
