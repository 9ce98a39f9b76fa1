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
///
/// Updates: M is the largest norm over the live rows. An upserted row may raise it only as far
/// as keeps every query of the row's own norm admissible (‖x‖² ≤ B for inner product,
/// (2‖x‖)² ≤ B for l2), so no write can shrink the admissible queries below that; and when the
/// row that holds M dies (deleted or replaced), M is measured again over the live rows.
#include <cfloat>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shardtopk/communicator.hpp"
#include "shardtopk/engine.hpp"
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
  /// The row with the largest norm (-1: no rows): its global row position where a shard is
  /// measured, its id once the index holds it (IngestStats::max_row_norm_row).
  std::int64_t row = -1;
};

/// The float64 norm of x [dim] (four partial sums, element d in sum d mod 4, combined as
/// (s0 + s1) + (s2 + s3)): the one norm every row bound is measured with.
double row_norm(const float* x, std::int64_t dim);

/// Float64 norms of rows [rows, dim] (raw values, before any cosine normalisation); rows are
/// named first_row + i. Largest wins; equal norms: the smaller row. Split by rows over `threads`
/// threads (the result does not depend on it).
NormSummary shard_norms(const float* data, std::int64_t rows, std::int64_t dim, std::int64_t first_row,
                        int threads = 1);
/// As above, from rows [rows, dim] in `format`: float32 values, or IEEE binary16 bit patterns
/// (each converted exactly to float32 first, io.f16c's `f16c` choosing how: the same bits), so
/// that a float16 corpus gives bit for bit the norms of the same values as float32.
NormSummary shard_norms(const void* data, RowFormat format, std::int64_t rows, std::int64_t dim,
                        std::int64_t first_row, int threads = 1, bool f16c = true);

/// Combine the shards' summaries (e.g. all-gathered from every rank).
NormSummary combine_norms(const std::vector<NormSummary>& parts);

/// Start-up check of one shard: refuses (Error naming `label` and the row, its norm and B) a
/// row that leaves no admissible query (l2: ‖x‖² > B), and a dimension above kMaxBoundedDim.
void check_corpus_norms(Metric m, const NormSummary& shard, std::int64_t dim, const std::string& label);

/// The largest norm an upserted row may have: √B (inner product), √B / 2 (l2), +inf (cosine).
double max_upsert_norm(Metric m);

/// Refuses (Error naming the id, its norm and the limit) upserted rows whose largest norm,
/// `rows` (its row: the id), is above max_upsert_norm(m).
void check_upsert_norm(Metric m, const NormSummary& rows);

/// Collective: the largest float64 norm over every rank's live rows (`live` [this rank's
/// slots], 1: live) as the engine stores them, named by id (-1: none live). nullopt when a rank
/// could not read its rows (the bound in force, an upper bound, is then kept).
std::optional<NormSummary> live_row_norms(Engine& engine, Communicator& comm, const std::vector<std::uint8_t>& live,
                                          std::int64_t dim);

/// Largest admissible query norm for the corpus: inner product B / M, l2 √B − M, cosine +inf
/// (and +inf when M = 0).
double max_query_norm(Metric m, const NormSummary& corpus);

/// The values of a batch of queries [batch, dim] (raw values, before cosine normalisation), in
/// one branch-free pass over them (per query the largest |value|): every value finite; for
/// cosine, no query of zero norm; for every other metric, no query whose norm could overflow a
/// score. A query passes the range check from the bound ‖q‖ ≤ √dim · max|q_d|; only one that
/// does not gets its float64 norm, which decides. Throws Error naming the first non-finite value
/// (query, column, value; row-major order), else the first zero-norm query (cosine), else the
/// first query over the bound with its float64 norm, the bound it would reach, B, and the id of
/// the row with the largest norm. Admission (search_batch.hpp) runs it once per batch.
void admit_query_values(Metric m, const NormSummary& corpus, const float* queries, int batch, std::int64_t dim);

/// Collective: replaces stats->max_row_norm / max_row_norm_row (this shard's) by the corpus's
/// (all ranks), and logs the admissible query norm on rank 0 (debug).
void allgather_norms(Communicator& comm, Metric m, IngestStats* stats);

}  // namespace shardtopk
