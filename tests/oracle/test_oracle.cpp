// The float64 oracle against a separately written brute force (long double accumulation,
// std::sort on (score, id) pairs, cosine by explicit normalisation), once, so that every other
// test may trust it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tools/oracle.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

using ::testing::HasSubstr;

struct Brute {
  std::vector<std::int64_t> ids;
  std::vector<long double> scores;  // reported units
};

// Independent restatement: normalise first (cosine), accumulate in long double, sort all pairs.
Brute brute_force(Metric m, const std::vector<float>& corpus, std::int64_t n, const std::vector<std::int64_t>& ids,
                  const std::vector<float>& queries, std::int64_t nq, std::int64_t dim, int k) {
  auto unit = [dim](const float* x) {
    std::vector<long double> u(x, x + dim);
    long double ss = 0;
    for (auto v : u) ss += v * v;
    const long double norm = std::sqrt(ss);
    for (auto& v : u) v /= norm;
    return u;
  };
  Brute b;
  for (std::int64_t q = 0; q < nq; ++q) {
    const float* qp = queries.data() + q * dim;
    const std::vector<long double> qu = unit(qp);
    std::vector<std::pair<long double, std::int64_t>> all;
    for (std::int64_t i = 0; i < n; ++i) {
      const float* x = corpus.data() + i * dim;
      long double s = 0;
      if (m == Metric::kCosine) {
        const std::vector<long double> xu = unit(x);
        for (std::int64_t d = 0; d < dim; ++d) s += qu[d] * xu[d];
      } else if (m == Metric::kL2) {
        for (std::int64_t d = 0; d < dim; ++d) {
          const long double diff = static_cast<long double>(qp[d]) - x[d];
          s += diff * diff;
        }
      } else {
        for (std::int64_t d = 0; d < dim; ++d) s += static_cast<long double>(qp[d]) * x[d];
      }
      // Sort key "smaller is better": negate similarities.
      all.emplace_back(m == Metric::kL2 ? s : -s, ids[i]);
    }
    std::sort(all.begin(), all.end());
    for (int j = 0; j < k; ++j) {
      b.ids.push_back(all[j].second);
      b.scores.push_back(m == Metric::kL2 ? all[j].first : -all[j].first);
    }
  }
  return b;
}

struct OracleCase {
  Metric metric;
  bool small_ints;
  std::int64_t n, dim, nq;
  int k;
};
std::ostream& operator<<(std::ostream& os, const OracleCase& c) {
  return os << to_string(c.metric) << (c.small_ints ? " small-int" : " random") << " n=" << c.n << " D=" << c.dim
            << " nq=" << c.nq << " K=" << c.k;
}

class OracleVsBruteForce : public ::testing::TestWithParam<OracleCase> {};

TEST_P(OracleVsBruteForce, SameIdsAndScores) {
  const OracleCase c = GetParam();
  auto corpus = c.small_ints ? test::small_ints(c.n * c.dim, 5) : test::random_floats(c.n * c.dim, 5);
  auto queries = c.small_ints ? test::small_ints(c.nq * c.dim, 6) : test::random_floats(c.nq * c.dim, 6);
  if (c.metric == Metric::kCosine) {  // cosine needs a direction: no all-zero rows
    test::fix_zero_rows(&corpus, c.dim);
    test::fix_zero_rows(&queries, c.dim);
  }
  // Shuffled, offset global ids, so the tie rule is tested on ids that are not positions.
  std::vector<std::int64_t> ids = test::iota_ids(c.n, 5000);
  std::mt19937_64 rng(9);
  std::shuffle(ids.begin(), ids.end(), rng);

  std::vector<std::int64_t> oid;
  std::vector<double> osc;
  oracle::topk(c.metric, corpus.data(), c.n, ids.data(), queries.data(), c.nq, c.dim, c.k, &oid, &osc, 3);
  const Brute b = brute_force(c.metric, corpus, c.n, ids, queries, c.nq, c.dim, c.k);
  ASSERT_EQ(oid.size(), b.ids.size());
  int id_diff = 0;
  for (size_t i = 0; i < oid.size(); ++i) {
    if (c.small_ints && c.metric != Metric::kCosine) {
      // exact arithmetic on both sides: identical ids (ties by id) and scores
      EXPECT_EQ(oid[i], b.ids[i]) << "slot " << i;
      EXPECT_EQ(osc[i], static_cast<double>(b.scores[i])) << "slot " << i;
    } else {
      EXPECT_NEAR(osc[i], static_cast<double>(b.scores[i]), 1e-12 * (1 + std::fabs(osc[i]))) << "slot " << i;
      if (oid[i] != b.ids[i]) {
        ++id_diff;  // allowed only where the scores are equal within rounding of float64 itself
        EXPECT_NEAR(osc[i], static_cast<double>(b.scores[i]), 1e-12 * (1 + std::fabs(osc[i])));
      }
    }
  }
  if (!c.small_ints) EXPECT_EQ(id_diff, 0) << "random data has no near ties at 1e-12";

  // The oracle's own score() agrees with the brute force for a returned id.
  const std::int64_t row = std::find(ids.begin(), ids.end(), oid[0]) - ids.begin();
  EXPECT_NEAR(oracle::score(c.metric, queries.data(), corpus.data() + row * c.dim, c.dim), osc[0],
              1e-12 * (1 + std::fabs(osc[0])));
}

// Cases: the three metrics on random data, exact small-integer data with many ties, K = N,
// K = 1, D = 1, D not a multiple of 8.
INSTANTIATE_TEST_SUITE_P(Cases, OracleVsBruteForce,
                         ::testing::Values(OracleCase{Metric::kInnerProduct, false, 300, 17, 6, 10},
                                           OracleCase{Metric::kCosine, false, 300, 17, 6, 10},
                                           OracleCase{Metric::kL2, false, 300, 17, 6, 10},
                                           OracleCase{Metric::kInnerProduct, true, 200, 3, 8, 50},
                                           OracleCase{Metric::kL2, true, 200, 3, 8, 50},
                                           OracleCase{Metric::kCosine, true, 200, 4, 8, 20},
                                           OracleCase{Metric::kL2, false, 25, 1, 4, 25},
                                           OracleCase{Metric::kInnerProduct, true, 40, 9, 3, 1}));

TEST(Oracle, TopKTiesGoToTheSmallerIdAndPositionsAreDefaultIds) {
  // Four identical rows: every score ties, so the answer is the ids in increasing order.
  const std::vector<float> corpus(4 * 2, 1.0f), q = {1.0f, 2.0f};
  std::vector<std::int64_t> oid;
  std::vector<double> osc;
  oracle::topk(Metric::kInnerProduct, corpus.data(), 4, nullptr, q.data(), 1, 2, 3, &oid, &osc);
  EXPECT_EQ(oid, (std::vector<std::int64_t>{0, 1, 2}));
  const std::vector<std::int64_t> ids = {40, 10, 30, 20};
  oracle::topk(Metric::kL2, corpus.data(), 4, ids.data(), q.data(), 1, 2, 4, &oid, &osc);
  EXPECT_EQ(oid, (std::vector<std::int64_t>{10, 20, 30, 40}));
  EXPECT_EQ(osc, (std::vector<double>{1.0, 1.0, 1.0, 1.0}));
}

TEST(Oracle, EpsilonIsTheDocumentedFormula) {
  EXPECT_DOUBLE_EQ(oracle::epsilon(0.0, 0.0), 1e-5);
  EXPECT_DOUBLE_EQ(oracle::epsilon(-3.0, 2.0), 4e-5);
  EXPECT_DOUBLE_EQ(oracle::epsilon(100.0, 50.0), 1e-5 * 101.0);
}

TEST(Oracle, CheckQueryCountsHitsSwapsAndBadScores) {
  // Corpus rows on a line: ip scores of query {1} are the values themselves.
  const std::vector<float> corpus = {5.0f, 4.0f, 4.0f, 3.0f, 1.0f};
  const std::vector<float> q = {1.0f};
  std::vector<std::int64_t> tid;
  std::vector<double> tsc;
  oracle::topk(Metric::kInnerProduct, corpus.data(), 5, nullptr, q.data(), 1, 1, 3, &tid, &tsc);
  ASSERT_EQ(tid, (std::vector<std::int64_t>{0, 1, 2}));
  {  // the true answer
    const std::int64_t got[] = {0, 1, 2};
    const float sc[] = {5.0f, 4.0f, 4.0f};
    const auto c = oracle::check_query(Metric::kInnerProduct, corpus.data(), 5, nullptr, q.data(), 1, 3, got, sc,
                                       tid.data(), tsc.data());
    EXPECT_EQ(c.hits, 3);
    EXPECT_EQ(c.exact_id_matches, 3);
    EXPECT_EQ(c.near_tie_swaps + c.bad_scores + c.out_of_order + c.duplicates, 0);
  }
  {  // a tie swap (2 before 1): both hits, counted as near-tie swaps, not hidden
    const std::int64_t got[] = {0, 2, 1};
    const float sc[] = {5.0f, 4.0f, 4.0f};
    const auto c = oracle::check_query(Metric::kInnerProduct, corpus.data(), 5, nullptr, q.data(), 1, 3, got, sc,
                                       tid.data(), tsc.data());
    EXPECT_EQ(c.hits, 3);
    EXPECT_EQ(c.near_tie_swaps, 2);
  }
  {  // a miss, a wrong score, a duplicate
    const std::int64_t got[] = {0, 0, 3};
    const float sc[] = {5.0f, 4.5f, 3.0f};
    const auto c = oracle::check_query(Metric::kInnerProduct, corpus.data(), 5, nullptr, q.data(), 1, 3, got, sc,
                                       tid.data(), tsc.data());
    EXPECT_EQ(c.hits, 2);
    EXPECT_EQ(c.duplicates, 1);
    EXPECT_EQ(c.bad_scores, 1);
    EXPECT_EQ(c.out_of_order, 0);
  }
}

TEST(Oracle, RejectsKOutOfRangeAndZeroNormCosine) {
  const std::vector<float> corpus = {1.0f, 0.0f, 0.0f, 0.0f}, q = {1.0f, 1.0f};
  std::vector<std::int64_t> oid;
  std::vector<double> osc;
  EXPECT_THAT(test::error_of([&] {
                oracle::topk(Metric::kInnerProduct, corpus.data(), 2, nullptr, q.data(), 1, 2, 3, &oid, &osc);
              }),
              HasSubstr("k=3"));
  EXPECT_THAT(test::error_of([&] { oracle::score(Metric::kCosine, q.data(), corpus.data() + 2, 2); }),
              HasSubstr("zero-norm"));
}

}  // namespace
}  // namespace shardtopk
