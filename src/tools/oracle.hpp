#pragma once
/// @file oracle.hpp
/// The float64 reference: a plain loop that shares no code with the engines (DESIGN.md
/// "Correctness terms"). Used by tests, the importers (ground truth) and `eval`.

#include <cstdint>
#include <vector>

#include "shardtopk/types.hpp"

namespace shardtopk::oracle {

/// float64 score of one (query, row) pair in the metric's own units: similarity for
/// inner_product and cosine (cosine divides by both float64 norms), squared distance for l2.
double score(Metric m, const float* q, const float* x, std::int64_t dim);

/// True when a is better than b for metric m (higher similarity / smaller distance; equal:
/// smaller id). A float64 restatement of the ordering rule for reported units.
bool better(Metric m, double score_a, std::int64_t id_a, double score_b, std::int64_t id_b);

/// Exact top-k of queries [nq, dim] over corpus [n, dim] with global ids `ids` (nullptr: row
/// positions). Outputs [nq, k] ids and float64 scores (reported units), best first.
/// `threads` parallelises over queries only (each query's loop is sequential).
void topk(Metric m, const float* corpus, std::int64_t n, const std::int64_t* ids,
          const float* queries, std::int64_t nq, std::int64_t dim, int k,
          std::vector<std::int64_t>* out_ids, std::vector<double>* out_scores, int threads = 1);

/// DESIGN.md's tolerance: ε = 1e-5 · (max(|best|, |kth|) + 1).
double epsilon(double best, double kth);

/// Result of checking one query's answer against the oracle.
struct Check {
  int hits = 0;            ///< returned ids whose float64 score is within ε of the true k-th
  int exact_id_matches = 0;  ///< positions where the id equals the oracle's id
  int near_tie_swaps = 0;  ///< positions where ids differ but both scores are within ε
  int bad_scores = 0;      ///< returned score differs from the float64 score of its id by > ε
  int out_of_order = 0;    ///< adjacent pairs out of order by more than ε
  int duplicates = 0;      ///< ids returned twice
};

/// Check one query's returned ids/scores [k] (scores in reported units) against the corpus.
/// `true_ids`/`true_scores` [k] come from oracle::topk.
Check check_query(Metric m, const float* corpus, std::int64_t n, const std::int64_t* ids,
                  const float* query, std::int64_t dim, int k, const std::int64_t* got_ids,
                  const float* got_scores, const std::int64_t* true_ids,
                  const double* true_scores);

}  // namespace shardtopk::oracle
