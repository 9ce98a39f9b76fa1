#pragma once
// The float64 oracle over the rows a filter passes (DESIGN.md invariant 9 and "Correctness
// terms"): the sub-corpus of passing rows with their global ids, and the check of one query's
// filtered answer against oracle::topk over it: the count is min(k, passing rows), the slots past
// it are padding (kPadId; −inf, or +inf for l2), and the real results are the oracle's, exactly
// (ids and scores) or within DESIGN.md's ε with near-tie swaps counted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tools/oracle.hpp"
#include "shardtopk/ordering.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk::test {

/// The rows of a corpus that pass a predicate, in corpus order, with their global ids.
struct Subset {
  std::vector<float> rows;          ///< [n, dim]
  std::vector<std::int64_t> ids;    ///< [n]
  std::int64_t n = 0;
};

/// Rows r of `corpus` [rows, dim] with pass(r); global ids from `ids` [rows] (nullptr: r).
inline Subset passing_rows(const std::vector<float>& corpus, std::int64_t rows, std::int64_t dim,
                           const std::int64_t* ids, const std::function<bool(std::int64_t)>& pass) {
  Subset s;
  for (std::int64_t r = 0; r < rows; ++r) {
    if (!pass(r)) continue;
    s.rows.insert(s.rows.end(), corpus.begin() + r * dim, corpus.begin() + (r + 1) * dim);
    s.ids.push_back(ids ? ids[r] : r);
    ++s.n;
  }
  return s;
}

/// Checks one query's filtered answer: `count` real results then padding in got_ids/got_scores
/// [k]. exact: ids and scores equal the oracle's (inputs whose scores are exact in float32);
/// otherwise within ε. Adds a gtest failure naming `what` for each violation.
/// @returns the near-tie swaps (0 when exact).
inline int expect_filtered_answer(Metric m, const Subset& s, std::int64_t dim, const float* query, int k,
                                  const std::int64_t* got_ids, const float* got_scores, int count, bool exact,
                                  const std::string& what) {
  const int want = static_cast<int>(std::min<std::int64_t>(k, s.n));
  EXPECT_EQ(count, want) << what << ": real results (" << s.n << " rows pass, k " << k << ")";
  const float pad = m == Metric::kL2 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  int bad_pad = 0;
  for (int j = std::max(0, std::min(count, k)); j < k; ++j)
    if (got_ids[j] != kPadId || got_scores[j] != pad) ++bad_pad;
  EXPECT_EQ(bad_pad, 0) << what << ": slots past the count are not padding (kPadId, " << pad << ")";
  if (want == 0 || count != want) return 0;
  std::vector<std::int64_t> tid;
  std::vector<double> tsc;
  oracle::topk(m, s.rows.data(), s.n, s.ids.data(), query, 1, dim, want, &tid, &tsc, 1);
  if (exact) {
    int bad = 0;
    for (int j = 0; j < want; ++j)
      if (got_ids[j] != tid[j] || static_cast<double>(got_scores[j]) != tsc[j]) {
        if (++bad <= 3)
          ADD_FAILURE() << what << ": rank " << j << ": got id " << got_ids[j] << " score " << got_scores[j]
                        << ", oracle id " << tid[j] << " score " << tsc[j];
      }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want << " positions differ from the oracle";
    return 0;
  }
  const oracle::Check c =
      oracle::check_query(m, s.rows.data(), s.n, s.ids.data(), query, dim, want, got_ids, got_scores, tid.data(),
                          tsc.data());
  EXPECT_EQ(c.hits, want) << what << ": misses (an id not among the rows that pass, or beyond the k-th by more than eps)";
  EXPECT_EQ(c.bad_scores, 0) << what << ": scores off by more than eps";
  EXPECT_EQ(c.out_of_order, 0) << what;
  EXPECT_EQ(c.duplicates, 0) << what;
  return c.near_tie_swaps;
}

}  // namespace shardtopk::test
