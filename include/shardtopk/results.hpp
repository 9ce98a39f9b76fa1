#pragma once
/// @file results.hpp
/// Result files (`search --out R.h5`) and recall evaluation (`eval`).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardtopk/types.hpp"

namespace shardtopk {

/// What a search wrote, besides ids and scores.
struct ResultMeta {
  Metric metric = Metric::kInnerProduct;
  int k = 0;
  int world_size = 1;
  std::string engine;  ///< "cpu" | "cuda"
  std::string comm;    ///< "mpi" | "nccl"
  Dtype dtype = Dtype::kFloat32;
  std::string corpus_path;
  std::string corpus_dataset;
  std::int64_t corpus_rows = 0;
  std::int64_t corpus_dim = 0;
  std::string queries_path;
  std::string queries_dataset;
  std::string filter;  ///< the filter every query had, as JSON text (empty: none)
};

/// Write R.h5: `ids` int64 [nq, k], `scores` float32 [nq, k] (similarity, or squared distance
/// for l2), and root attributes metric, k, world_size, engine, comm, dtype, corpus_path,
/// corpus_dataset, corpus_rows, corpus_dim, queries_path, queries_dataset, version.
/// With `counts` ([nq], a filtered search): also `counts` int32 [nq], query q's real results,
/// and `filter`, a string dataset [1] holding meta.filter; row q of ids and scores holds
/// counts[q] results, then padding: id 2^63 − 1 (kPadId, never a row's id) and score −inf
/// (+inf for l2).
/// @throws Error when the file cannot be written.
void write_results(const std::string& path, const ResultMeta& meta, const std::vector<std::int64_t>& ids,
                   const std::vector<float>& scores, std::int64_t nq,
                   const std::vector<std::int32_t>* counts = nullptr);

/// Recall of a result file against ann-benchmarks ground truth.
struct EvalReport {
  int k = 0;                      ///< K evaluated: the result file's, or the truth's when that is smaller
  int result_k = 0;               ///< K (columns) of the result file; > k when the truth has fewer columns
  std::int64_t queries = 0;
  std::map<int, double> recall;   ///< recall@k for k in {1, 10, 100, K} that fit both files
  std::int64_t near_tie_swaps = 0;  ///< positions where ids differ from the truth but lie within ε
  std::int64_t misses = 0;          ///< returned ids worse than the true k-th by more than ε, or repeated (at K)
  std::int64_t duplicates = 0;      ///< ids returned twice or more for one query (at K; counted in misses)
  bool scores_verified = false;     ///< near ties judged by the truth file's rows (float64), not the result's scores
  std::string metric;
};

/// Tie-tolerant recall (DESIGN.md): a returned id at rank ≤ k is a hit when its distance is
/// within ε of the true k-th distance. Uses the truth file's `neighbors` and `distances`
/// (distances in the truth file's own units: for l2, ann-benchmarks stores the Euclidean
/// distance, which is squared before comparing; `distance_units` attribute "squared" skips it).
/// The result file's nq queries are compared with the first nq rows of the truth (a search
/// with --max-queries evaluates against the full truth file).
/// @throws Error when shapes disagree (more queries than the truth, K larger than its columns),
///   or when the results are of a filtered search (the truth is over the whole corpus).
EvalReport evaluate(const std::string& results_path, const std::string& truth_path);

}  // namespace shardtopk
