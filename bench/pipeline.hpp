#pragma once
/// @file pipeline.hpp
/// What the benchmarks run: a sharded search over a generated (or HDF5) corpus, timed host to
/// host and step by step, and the checks of sampled answers against float64 references.
///
/// BenchIndex wraps the product's ShardedIndex: load_index for --corpus, build_index over a
/// generated shard otherwise, so host-to-host times go through the product's own path. Only the
/// instrumented iterations (search_split) time the data path's steps one by one, with the same
/// engine and communicator calls and a synchronisation after each.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "device_timer.hpp"
#include "harness.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/config.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/filter.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/shard_plan.hpp"

namespace shardtopk::bench {

/// A corpus: generated from (seed, global row, column) or read from HDF5.
struct CorpusSpec {
  bool generated = true;
  std::uint64_t seed = 1;
  std::string path, dataset = "train";
  std::int64_t rows = 0, dim = 0;
  Metric metric = Metric::kInnerProduct;
  Dtype dtype = Dtype::kFloat32;
  /// Generated int64 attribute columns for filters, by name (generated_attribute); each rank's
  /// shard gets them beside its rows (bench_filter).
  std::vector<std::string> attributes;
  /// Rows added by updates (bench_updates; generated corpora only): ids [rows, rows + added_rows)
  /// are rows too, id x holding the generated row rows + (x - rows) % added_pool (0: the
  /// generated row x itself). A pool repeats rows on purpose: equal scores, ties broken by id.
  std::int64_t added_rows = 0, added_pool = 0;
  /// Ids that are not live (deleted by updates), or empty: every id is live. The same function
  /// on every rank.
  std::function<bool(std::int64_t)> deleted;
};

/// Value of the generated attribute `name` at global row `row` of a corpus of `rows` rows, in
/// 0 .. 999: "clustered" = row · 1000 / rows (contiguous runs of equal values: a value's rows
/// share summary blocks), "scattered" = splitmix64(seed, row) mod 1000 (every block holds about
/// every value). A range of w values passes about w / 10 % of the rows either way.
/// @throws Error for another name.
std::int64_t generated_attribute(const std::string& name, std::uint64_t seed, std::int64_t row, std::int64_t rows);

/// Fill out [n, dim] with rows [lo, lo + n) as the engine stores them: generated (ids past
/// c.rows: their pool rows, CorpusSpec::added_rows) or read, then
/// L2-normalised for cosine (normalize_rows), then rounded to the storage dtype.
void stored_rows(const CorpusSpec& c, std::int64_t lo, std::int64_t n, float* out, int threads);

/// Wall time of each step of one instrumented search on rank 0 (ms). Device work is
/// synchronised after every step; a barrier before the all-gather takes the ranks' skew out of it.
struct StepTimes {
  double admit = 0, bcast = 0, scan = 0, scan_dev = 0, skew = 0, gather = 0, merge = 0, exported = 0;
};

class BenchIndex {
 public:
  /// Collective. Errors on any rank throw on every rank.
  BenchIndex(const CorpusSpec& corpus, const Config& cfg, const Options& opt);
  ~BenchIndex();

  /// Host to host: rank 0 passes queries [batch, dim]; every rank passes the same batch and k.
  /// `filters` (rank 0, optional): [batch] each query's filter; `counts` (rank 0, optional):
  /// [batch] real results per query (ShardedIndex::search).
  void search(const float* queries, int batch, int k, std::int64_t* ids, float* scores,
              const FilterProgram* const* filters = nullptr, std::int32_t* counts = nullptr);
  /// The attributes filters may name (the corpus's generated attributes).
  const AttributeSchema& attribute_schema() const { return schema_; }
  /// The product's index underneath (updates: submit_upsert, apply_writes, snapshot, follow).
  ShardedIndex& index() { return *index_; }
  /// The same steps with synchronisation and timing around each (rank 0's times).
  void search_split(const float* queries, int batch, int k, std::int64_t* ids, float* scores, StepTimes* t);

  int rank() const { return host().rank(); }
  int world_size() const { return host().world_size(); }
  RowRange my_rows() const { return mine_; }
  Communicator& host() const;
  Engine& engine() const;
  std::string engine_name() const;
  std::string comm_name() const;
  std::string device_name() const { return device_name_; }
  std::string generated_on() const { return generated_on_; }
  const CorpusSpec& corpus() const { return corpus_; }

 private:
  Communicator& data() const;
  void admit(const float* queries, int batch);
  void broadcast(int batch);
  void gather(int batch, int k);

  CorpusSpec corpus_;
  Options opt_;
  RowRange mine_;
  std::unique_ptr<ShardedIndex> index_;
  std::unique_ptr<DeviceTimer> timer_;  // after index_: destroyed first, while the engine's stream exists
  std::vector<float> host_rows_;
  // search_split's buffers in the index's memory space (the answer in mapped host memory)
  float* split_queries_ = nullptr;
  Candidate* split_local_ = nullptr;
  Candidate* split_gathered_ = nullptr;
  Candidate* split_merged_ = nullptr;
  std::int64_t* split_ids_ = nullptr;
  float* split_scores_ = nullptr;
  std::string device_name_, generated_on_;
  AttributeSchema schema_;
};

/// One returned answer to check (rank 0).
struct Sample {
  int entry = 0;   ///< configuration index
  int query = 0;   ///< index into the query pool
  int k = 0;
  std::vector<std::int64_t> ids;  ///< [k]; a filtered answer's slots past its real results hold kPadId
  std::vector<float> scores;  ///< reported units
  /// The query's filter, when it had one: filter_lo <= attribute <= filter_hi over the generated
  /// attribute CorpusSpec::attributes[filter_column] (-1: no filter).
  int filter_column = -1;
  std::int64_t filter_lo = 0, filter_hi = 0;
};

struct CheckResult {
  long long wrong = 0;       ///< DESIGN.md terms: misses + bad scores + out of order + duplicates
  long long near_ties = 0;   ///< near-tie swaps (counted, not wrong)
  int queries = 0;
  std::string first_problem;
};

/// Check every sample against float64 references computed over the corpus rows. Collective:
/// each rank scans its own rows [mine] on the host in slices with `threads` threads
/// (regenerated or read); rank 0 passes the samples, the others an empty vector.
/// kOracle: float64 top-K of every sampled query (merged over ranks), then oracle::check_query;
/// kCount: an independent count, per sample, of rows outside the returned list scoring better
/// than the returned K-th by more than ε, plus the returned scores against float64.
/// kCount on a GPU (`check_device`, bench/device_check.hpp): 0 always scans on the host; 1 counts
/// the misses on the rank's GPU (device host.local_rank()) when the corpus is generated, the
/// metric is inner_product or l2 and a GPU is visible, else on the host; 2 runs both and counts
/// every (rank, sample) whose two counts differ as wrong (a rank that cannot run the device pass
/// scans on the host only: `info->mode` is then not "count-device+host"). The returned rows are
/// re-scored on rank 0's host in every case.
/// Filtered samples (Sample::filter_column >= 0) are checked in count mode on the host whatever
/// `mode` asks: only rows that pass count as missed, a query with fewer real results than k must
/// have returned every row that passes (any other passing row is a miss), every returned row
/// must pass, and the slots past the real results must be padding (kPadId).
/// Updated corpora (CorpusSpec::added_rows, CorpusSpec::deleted): each rank also scans its share
/// of the added ids (shard_rows over them), deleted ids are never counted and a returned one is
/// wrong; the count is then taken on the host.
/// Returns per-entry results on rank 0 (`entries` long); `info` (rank 0) says which path ran.
struct CheckInfo {
  std::string mode;      ///< "oracle", "count-host", "count-device", "count-device+host", "count-mixed"
  std::string note;      ///< why a requested device pass did not run ("" otherwise)
  double device_s = -1;  ///< rank 0's device pass (s), -1 when none ran
};
std::vector<CheckResult> check_samples(const CorpusSpec& c, Communicator& host, RowRange mine,
                                       const std::vector<float>& queries, const std::vector<Sample>& samples,
                                       int entries, CheckMode mode, int threads, int check_device = 0,
                                       CheckInfo* info = nullptr);

}  // namespace shardtopk::bench
