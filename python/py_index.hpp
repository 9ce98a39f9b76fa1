#pragma once
// shardtopk.Index: one rank's ShardedIndex behind the Python API (docs/PYTHON.md). Rank 0's
// calls drive the collective search; the other ranks follow(). Searches run without the GIL,
// one at a time per index (a mutex), so Python threads may share an index.
//
// Arguments arrive as Python objects and are checked here, with the command line's messages
// where the check is the same (they come from the same shardtopk::Error sites); errors map to
// Python exceptions in module.cpp.

#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device.hpp"
#include "shardtopk/index.hpp"

namespace shardtopk::python {

namespace py = pybind11;

/// The order arguments of index.search (docs/PYTHON.md "Ranges, pages and counts"), as given.
struct OrderArgs {
  py::object min_score = py::none(), max_distance = py::none(), search_after = py::none();
  bool count_only = false;
  bool stats = false;
  bool bounded() const { return !min_score.is_none() || !max_distance.is_none() || !search_after.is_none(); }
  /// Whether the call answers (ids, scores, stats) instead of (ids, scores).
  bool any() const { return bounded() || count_only || stats; }
};

class PyIndex {
 public:
  /// Index.open: the config file, then `overrides` (keyword names with "__" for ".", or dotted
  /// keys through **{...}), then the collective load (load_index).
  static std::unique_ptr<PyIndex> open(py::object config_path, const py::kwargs& overrides);

  /// Index.from_arrays: every rank passes the same full arrays and keeps its shard_rows() slice.
  /// `attributes`: None, or a dict name → [rows] integers (int64) or reals (float64), for filters.
  static std::unique_ptr<PyIndex> from_arrays(py::object vectors, py::object ids, const std::string& metric,
                                              const std::string& dtype, py::object k_max, py::object batch_max,
                                              const std::string& backend, py::object attributes,
                                              const py::kwargs& overrides);

  /// Destroyed open: closed as close() does (a follower serves rank 0 until rank 0 closes).
  ~PyIndex();
  PyIndex(const PyIndex&) = delete;
  PyIndex& operator=(const PyIndex&) = delete;

  /// index.search → (ids, scores), numpy arrays for host queries, DeviceArrays (or `out`) for
  /// device queries. `filter`: None, a dict (or its JSON text), compiled once for every query.
  /// With an order argument (`order.any()`, host queries only) → (ids, scores, stats dict).
  /// `k` or `limit` (the same number, one of them; 1 for count_only when neither is given).
  py::tuple search(py::object queries, py::object k, py::object filter, py::object limit, const OrderArgs& order,
                   py::object stream, py::object out);
  /// index.rank_of(query [dim], ids [n]) → (ranks int64 [n], scores float32 [n]): ShardedIndex::rank.
  py::tuple rank_of(py::object query, py::object ids, py::object filter);
  /// Updates (docs/PYTHON.md "Updates"), rank 0, on an index with a storage directory
  /// (storage.dir): each returns once the write is durable and visible to every later search.
  /// upsert: ids [n] integers, vectors [n, dim] reals, attributes None or {name: [n] values}
  /// (every corpus attribute) → {"upserted": n, "seq": s}. remove: ids [n] → {"deleted": live
  /// ids removed, "seq": s}. remove_matching: a filter (as search's) → the same. snapshot →
  /// {"path", "seq", "rows"}.
  py::dict upsert(py::object ids, py::object vectors, py::object attributes);
  py::dict remove(py::object ids);
  py::dict remove_matching(py::object filter);
  py::dict snapshot();
  void follow();
  void close();
  py::dict info();
  int rank() const { return rank_; }
  int ranks() const { return world_; }
  std::int64_t dim() const { return dim_; }
  bool closed() const { return closed_; }

  /// Interpreter exit: every open index is closed (collectively), then MPI is finalised.
  static void close_all_and_finalize();

 private:
  explicit PyIndex(std::unique_ptr<ShardedIndex> index);
  void require_open(const char* call) const;
  /// Runs one write `op` on the index (GIL released, the index's lock held, open checked), then
  /// the snapshot policy (storage.snapshot_log_bytes); returns op's result.
  template <typename Op>
  WriteResult write(const char* call, Op op) {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    require_open(call);
    const WriteResult r = op();
    index_->snapshot_if_log_exceeds();
    return r;
  }
  /// Open, and rank 0 (the calls that drive the collective ones).
  void require_driver(const char* call) const;
  /// search() once k and the filter are known: host or device queries (lists through numpy).
  py::tuple search_queries(py::object queries, long long k, const FilterProgram* filter, const OrderArgs& order,
                           py::object stream, py::object out);
  py::tuple search_host(const float* q, std::int64_t batch, bool one_d, long long k, const FilterProgram* filter,
                        const OrderArgs& order, py::object out);
  py::tuple search_device(py::object queries, int device, long long k, const FilterProgram* filter,
                          const OrderArgs& order, py::object stream, py::object out);
  /// k from `k` or `limit`, checked against the order arguments (which may be given, which not).
  long long search_k(py::handle k, py::handle limit, const OrderArgs& order) const;
  /// Each query's QueryBounds [batch] from the order arguments (empty: none), checked for shape
  /// and float32 range; the index's admission checks the rest.
  std::vector<QueryBounds> query_bounds(const OrderArgs& order, std::int64_t batch) const;
  /// Each query's filter for a piece of a batch: [batch_max] copies of `filter`, or nullptr.
  const FilterProgram* const* piece_filters(const FilterProgram* filter);
  /// Runs `run(offset, count, piece)` over the batch in pieces of at most search.batch_max
  /// queries; a refused piece's message names its queries when the call was split.
  template <typename Run>
  void in_pieces(std::int64_t batch, const Run& run);
  /// The call's pieces admitted in order (`admit(offset, count, filters)`: one SearchBatch),
  /// before anything is searched (GIL released, the index's lock held, open checked).
  template <typename Admit>
  void admit_pieces(std::int64_t batch, const Admit& admit, const FilterProgram* filter,
                    std::vector<SearchBatch>* pieces);
  /// Ends this rank's part: rank 0 shuts the followers down; a follower follows until then.
  /// Frees the index. Caller holds mu_ and not the GIL.
  void close_locked();

  std::mutex mu_;                          // one call into the index at a time
  std::unique_ptr<ShardedIndex> index_;    // null once closed
  std::atomic<bool> closed_{false};
  // What info() reports, fixed at construction (readable after close()).
  int rank_ = 0, world_ = 1;
  std::int64_t dim_ = 0, rows_ = 0;
  std::int64_t k_rows_ = 0;  // k's upper bound besides k_max: the rows, or an updatable index's slots
  int k_max_ = 0, batch_max_ = 0;
  bool cuda_ = false, writable_ = false;
  int device_ = -1;
  std::string metric_, dtype_, engine_, device_name_, comm_;
  std::uint64_t resident_bytes_ = 0;
  int max_filters_ = 0;
  AttributeSchema attributes_;
  std::vector<const FilterProgram*> piece_filters_;  // [batch_max], under mu_
};

}  // namespace shardtopk::python
