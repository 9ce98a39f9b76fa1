#pragma once
// The one thing the service needs from an index: the admission of a request, a blocking
// collective search of a batch of admitted requests, its shape and limits, and per-rank counters
// for /metrics. The batcher and the HTTP front end know only this interface; index_backend.cpp
// adapts ShardedIndex to it (the only file to change when the index API changes), and
// tests/service/test_batcher.cpp drives the batcher with a fake.
#include <cstdint>
#include <string>
#include <vector>

#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"
#include "shardtopk/search_batch.hpp"

namespace shardtopk::service {

/// Shape and limits of the served index, fixed once it is ready.
struct BackendInfo {
  std::int64_t rows = 0;   ///< corpus rows over all ranks
  std::int64_t dim = 0;    ///< query and row dimension
  int k_max = 0;           ///< largest k a search may ask for (search.k_max)
  int batch_max = 0;       ///< largest batch one search takes (search.batch_max)
  int ranks = 0;           ///< world size
  std::string metric;      ///< inner_product, cosine or l2
  std::string dtype;       ///< storage type of the corpus rows
  std::string engine;      ///< cpu or cuda
  std::string comm;        ///< mpi or nccl
  int max_filters = 1;     ///< distinct filters one search takes (min(search.max_filters, batch_max))
  AttributeSchema attributes;  ///< what filters may name (corpus.attributes), in order
};

/// One rank's counters, for /metrics.
struct RankCounters {
  double searches = 0;        ///< local searches run
  double search_seconds = 0;  ///< time in the local search, summed
};

/// The batch was refused before any search ran (its requests were admitted against a norm bound
/// that writes have raised since); every rank is still usable. Answer 400.
class BatchRejected : public Error {
 public:
  explicit BatchRejected(const std::string& what) : Error(what) {}
};

/// A rank's local search failed; every rank is still usable. Answer 500.
class SearchFailed : public Error {
 public:
  explicit SearchFailed(const std::string& what) : Error(what) {}
};

/// A rank is gone or stalled (a collective failed or timed out); the job must end. Answer 503.
class RankLost : public Error {
 public:
  explicit RankLost(const std::string& what) : Error(what) {}
};

class SearchBackend {
 public:
  virtual ~SearchBackend() = default;

  virtual BackendInfo info() const = 0;

  /// Admits one request (any thread): `nq` queries [nq, dim] (float32, row-major) for k results
  /// each, every one with `filter` (compiled against info().attributes; nullptr: none). The
  /// request's one check (k, the rows, the filter, the values), with the index's wording; the
  /// value points at `queries` and `filter`, which the job keeps until it is answered.
  /// @throws Error naming the problem (answer 400).
  /// `bounds` [nq] (nullptr: none): each query's bounds in the total order; `stats`: the search
  /// reports QueryStats.
  virtual SearchBatch admit(const float* queries, int nq, long long k, const FilterProgram* filter,
                            const QueryBounds* bounds = nullptr, bool stats = false) const = 0;

  /// Blocking search of a batch of admitted requests (BatchComposer) for their k best rows:
  /// ids [batch, k] and scores [batch, k], best first, and counts [batch], the real results of
  /// each query (k, or fewer when fewer rows pass its filter: the rest of its row is padding).
  /// Called from the thread that owns the index (rank 0's main thread: the only thread making
  /// MPI calls). @throws BatchRejected, SearchFailed or RankLost as described above.
  /// `stats` [batch]: filled for a batch that wants them (SearchBatch::wants_stats).
  virtual void search(const SearchBatch& batch, std::int64_t* ids, float* scores, std::int32_t* counts,
                      QueryStats* stats) = 0;

  /// Blocking exact ranks of `ids` [n] for one admitted-on-the-spot `query` [dim] among the live
  /// rows passing `filter` (nullptr: every row): ranks [n] (1 + the rows ahead in the order) and
  /// scores [n] (reported units). Index thread, as search. @throws BatchRejected for a request
  /// the index refuses (n out of range, an unknown id named, the query's values; answer 400),
  /// SearchFailed or RankLost as search.
  virtual void rank(const float* query, const std::int64_t* ids, int n, const FilterProgram* filter,
                    std::int64_t* ranks, float* scores) = 0;

  /// The last write the searches so far reflect (0: none, or a read-only index). Index thread.
  virtual std::uint64_t applied_seq() const { return 0; }

  /// Every rank's counters [ranks] (a collective on the same thread as search).
  /// @throws RankLost when a rank is gone.
  virtual std::vector<RankCounters> rank_counters() = 0;
};

}  // namespace shardtopk::service
