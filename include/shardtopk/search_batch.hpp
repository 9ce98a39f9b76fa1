#pragma once
/// @file search_batch.hpp
/// A batch of queries admitted for search (DESIGN.md invariant 12). Its values are checked once,
/// where they enter (the service's request parser, the command line, the Python module, a C++
/// call), into a SearchBatch that the index, the communicators and the engines take as given:
/// k, the queries, the batch's distinct filter programs and each query's program. Every refusal
/// has one wording, whichever entry point it came through.

#include <cstdint>
#include <mutex>
#include <cmath>
#include <limits>
#include <vector>

#include "shardtopk/filter.hpp"
#include "shardtopk/ordering.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk {

/// The largest k a search may ask for: 1 .. min(k_max, k_rows). @throws Error naming k, the
/// range and the binding limit ("(search.k_max)" or "(the corpus rows)").
void check_k(long long k, std::int64_t k_max, std::int64_t k_rows);

/// Where one query's answer lies in the total order (DESIGN.md invariant 11), in the metric's
/// reported units: similarity for inner_product and cosine, squared distance for l2.
/// Default: every row.
struct QueryBounds {
  /// Pages: only rows strictly after (after_score, after_id) in the order (the last row of the
  /// previous page, as reported).
  bool has_after = false;
  float after_score = 0;
  std::int64_t after_id = 0;
  /// Ranges: only rows ahead of (bound, bound_id) or equal to it: inner_product and cosine
  /// score ≥ bound (min_score), l2 distance ≤ bound (max_distance) with bound_id kPadId; and the
  /// exact number of those rows, past k too, in QueryStats::total. A smaller bound_id takes only
  /// the rows of score `bound` whose id is below bound_id (rank of a row: bound_id = its id).
  bool has_bound = false;
  float bound = 0;
  std::int64_t bound_id = kPadId;
};

/// The float32 bound that keeps exactly the rows a float64 bound `d` keeps: a float32 score f
/// satisfies f >= d exactly when f >= bound_as_float(d, false) (min_score, rounded up), and
/// f <= d exactly when f <= bound_as_float(d, true) (l2's max_distance, rounded down).
inline float bound_as_float(double d, bool l2) {
  float f = static_cast<float>(d);
  if (!l2 && static_cast<double>(f) < d) f = std::nextafter(f, std::numeric_limits<float>::infinity());
  if (l2 && static_cast<double>(f) > d) f = std::nextafter(f, -std::numeric_limits<float>::infinity());
  return f;
}

/// What a search saw of one query, summed over the ranks (ShardedIndex::search's `stats`).
struct QueryStats {
  std::int64_t total = -1;    ///< rows passing the filter within QueryBounds' bound; -1: no bound
  std::int64_t passing = 0;   ///< live rows passing the query's filter (every live row without one)
  std::int64_t scanned = 0;   ///< live rows the query was evaluated against
};

/// What a batch is admitted against: the index's shape and limits (ShardedIndex::info).
struct SearchLimits {
  std::int64_t dim = 0;     ///< values per query
  Metric metric = Metric::kInnerProduct;
  int k_max = 1;            ///< search.k_max
  std::int64_t k_rows = 0;  ///< k's other bound: the corpus rows, or an updatable index's slots
  int batch_max = 1;        ///< search.batch_max
  int max_filters = 1;      ///< distinct filters per batch: min(search.max_filters, batch_max)
  AttributeSchema schema;   ///< what filters may name (corpus.attributes)
  bool device_queries = false;  ///< the engine takes queries in device memory (the CUDA engine)
  /// The largest float64 norm of a corpus row and its global row (-1: none): every admitted
  /// query's scores stay finite against it (docs/EXACTNESS.md "Score range").
  double max_row_norm = 0;
  std::int64_t max_row_norm_row = -1;
};

/// An admitted batch: k, the queries [size, dim] float32 (host memory, checked; or device memory,
/// checked on the device when the search stages them), the batch's distinct filter programs
/// (equal programs once; programs that pass every row left out) and each query's program.
/// A view: it points at the caller's queries and programs, which must stay alive and unchanged
/// until the search that takes it has returned. Default-constructed: the empty batch that ranks
/// other than 0 pass to ShardedIndex::search.
class SearchBatch {
 public:
  SearchBatch() = default;

  int size() const { return size_; }  ///< queries, 1 .. batch_max (0: empty)
  int k() const { return k_; }
  /// [size, dim] float32, row-major: host memory, or the device memory of the index's GPU
  /// (on_device()).
  const float* queries() const { return queries_; }
  bool on_device() const { return on_device_; }
  /// Device queries: the cudaStream_t whose queued work writes them (nullptr: the legacy stream).
  void* stream() const { return stream_; }

  /// The distinct programs [filter_count()], each fitting the index's attribute schema.
  int filter_count() const { return static_cast<int>(programs_.size()); }
  const FilterProgram* const* filter_programs() const { return programs_.data(); }
  /// [size] query q's program, an index into filter_programs(), or -1 (every row); nullptr when
  /// filter_count() is 0.
  const std::int32_t* query_program() const { return programs_.empty() ? nullptr : query_program_.data(); }
  /// [size] each query's window in ranking scores (ordering.hpp), or nullptr: every row.
  const QueryWindow* windows() const { return windows_.empty() ? nullptr : windows_.data(); }
  /// Whether the search reports QueryStats (a bound, or asked for at admission).
  bool wants_stats() const { return stats_ || !windows_.empty(); }

 private:
  friend class Admission;
  friend class BatchComposer;
  const float* queries_ = nullptr;
  int size_ = 0;
  int k_ = 0;
  bool on_device_ = false;
  void* stream_ = nullptr;
  std::vector<const FilterProgram*> programs_;
  std::vector<std::uint64_t> program_digests_;  // [programs_] each one's digest (finding equal programs)
  std::vector<std::int32_t> query_program_;
  std::vector<QueryWindow> windows_;
  bool stats_ = false;
  // The corpus norm bound the host queries were checked against; the index re-checks only when
  // writes have raised it since (SearchLimits::max_row_norm).
  double admitted_norm_ = 0;
};

/// The one place batches are checked. Thread-safe: the service admits requests on its HTTP
/// threads while the index thread searches and applies writes (which may raise the norm bound).
class Admission {
 public:
  explicit Admission(SearchLimits limits);

  /// The limits, with the norm bound as of now.
  SearchLimits limits() const;

  /// Host queries [batch, dim] float32 and, optionally, filters [batch] (query q's program,
  /// compiled against limits().schema, or nullptr for every row). Checks, in this order: k
  /// (check_k), the batch (1 .. batch_max), the filters (each fits the schema; at most
  /// max_filters distinct ones), the values (finite, named by query and column; cosine: a
  /// non-zero norm; other metrics: a norm whose scores cannot overflow float32, docs/EXACTNESS.md
  /// "Score range"). @throws Error naming the first problem.
  SearchBatch admit(const float* queries, int batch, long long k, const FilterProgram* const* filters = nullptr) const;

  /// admit() with each query's bounds (`bounds` [batch], nullptr: none) and, with `stats`, the
  /// search's QueryStats asked for (a query with a bound reports them anyway). The bounds are
  /// checked after the filters: finite values, a bound only of the metric's kind.
  /// @throws Error as admit(), naming the query and the bad value ("query 1: search_after score
  ///   nan is not finite"); for bounds or stats on an engine without them (the CUDA engine).
  SearchBatch admit(const float* queries, int batch, long long k, const FilterProgram* const* filters,
                    const QueryBounds* bounds, bool stats) const;

  /// Device queries [batch, dim] float32 written by work queued on `cuda_stream`: k, the batch
  /// and the filters are checked here; the values on the device, when the search stages them.
  /// @throws Error as admit(), and without limits().device_queries.
  SearchBatch admit_device(const float* d_queries, void* cuda_stream, int batch, long long k,
                           const FilterProgram* const* filters = nullptr) const;

  /// The norm bound after writes (the largest norm of a live row and its id; -1: none).
  void set_norm_bound(double norm, std::int64_t row);

  /// Whether `batch`'s host queries were checked against the current norm bound (one compare);
  /// when writes have raised it since, checks them again. @throws Error as admit().
  void recheck_norms(const SearchBatch& batch) const;

 private:
  void admit_shape(SearchBatch* b, int batch, long long k, const FilterProgram* const* filters) const;
  void admit_values(SearchBatch* b, const float* queries) const;
  void admit_bounds(SearchBatch* b, const QueryBounds* bounds) const;

  SearchLimits limits_;  // max_row_norm / max_row_norm_row under mu_
  mutable std::mutex mu_;
};

/// Merges admitted requests of one k into one SearchBatch (the service's micro-batches) without
/// checking them again: their queries, in order, copied into one buffer, and their filters
/// (equal programs once). Buffers are sized once, at construction.
class BatchComposer {
 public:
  BatchComposer(int batch_max, int max_filters, std::int64_t dim);

  /// Starts a new batch.
  void clear();
  /// Adds `request` (host queries) when it fits: the same k as the first, and with it at most
  /// batch_max queries and max_filters distinct filters. Returns false, adding nothing, when
  /// it does not. The request, and its queries, must stay alive until the search of batch()
  /// has returned.
  bool add(const SearchBatch& request);
  int size() const { return rows_; }
  /// The batch of every request added, in order: several requests' queries copied here end to
  /// end; one request's used where they are (no copy). Valid until clear().
  const SearchBatch& batch();

 private:
  int batch_max_, max_filters_;
  std::int64_t dim_;
  int rows_ = 0;
  std::vector<const SearchBatch*> parts_;
  std::vector<std::int32_t> part_first_program_;  // per part: its programs' indices start here ...
  std::vector<std::int32_t> program_map_;         // ... in this map into batch_.programs_
  std::vector<float> queries_;                    // [batch_max, dim]
  SearchBatch batch_;
};

}  // namespace shardtopk
