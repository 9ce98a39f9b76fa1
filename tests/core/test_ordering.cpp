// The ordering rule (invariant 1), the shard plan and the host k-way merge.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "shardtopk/error.hpp"
#include "shardtopk/merge.hpp"
#include "tools/oracle.hpp"
#include "shardtopk/ordering.hpp"
#include "shardtopk/shard_plan.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

using ::testing::HasSubstr;
using test::error_of;

constexpr float kInf = std::numeric_limits<float>::infinity();

// ------------------------------------------------------------------------------ comparator

TEST(Ordering, HigherScoreWins) {
  EXPECT_TRUE(better(1.0f, 5, 0.5f, 1));
  EXPECT_FALSE(better(0.5f, 1, 1.0f, 5));
  EXPECT_TRUE(better(-1.0f, 100, -2.0f, 0));
  EXPECT_TRUE(better(std::numeric_limits<float>::denorm_min(), 9, 0.0f, 0));
}

TEST(Ordering, EqualScoresGoToTheSmallerId) {
  EXPECT_TRUE(better(0.25f, 3, 0.25f, 4));
  EXPECT_FALSE(better(0.25f, 4, 0.25f, 3));
  EXPECT_TRUE(better(-kInf, 0, -kInf, 1));
  EXPECT_TRUE(better(kInf, 0, kInf, 1));
  // Ids are global ids: negative and very large values order the same way.
  EXPECT_TRUE(better(1.0f, -7, 1.0f, 2));
  EXPECT_TRUE(better(1.0f, kPadId - 1, 1.0f, kPadId));
}

TEST(Ordering, Irreflexive) {
  EXPECT_FALSE(better(0.5f, 7, 0.5f, 7));
  const Candidate c{0.5f, 7};
  EXPECT_FALSE(better(c, c));
  EXPECT_FALSE(better(pad_candidate(), pad_candidate()));
}

TEST(Ordering, PlusAndMinusZeroAreEqualSoTheIdDecides) {
  EXPECT_TRUE(better(+0.0f, 1, -0.0f, 2));
  EXPECT_TRUE(better(-0.0f, 1, +0.0f, 2));
  EXPECT_FALSE(better(+0.0f, 2, -0.0f, 1));
  EXPECT_FALSE(better(-0.0f, 2, +0.0f, 1));
}

TEST(Ordering, PadCandidateLosesToEveryRealCandidate) {
  const Candidate pad = pad_candidate();
  EXPECT_EQ(pad.id, kPadId);
  EXPECT_TRUE(std::isinf(pad.score) && pad.score < 0);
  for (float s : {kInf, 1.0f, 0.0f, -0.0f, -1e30f, -std::numeric_limits<float>::max(), -kInf}) {
    const Candidate real{s, 123};
    EXPECT_TRUE(better(real, pad)) << "score " << s;
    EXPECT_FALSE(better(pad, real)) << "score " << s;
  }
  // Even the largest non-pad id with a -inf score beats padding.
  EXPECT_TRUE(better(Candidate{-kInf, kPadId - 1}, pad));
}

TEST(Ordering, CandidateOverloadAgreesWithScalarOverload) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> s(-2, 2), id(0, 4);
  for (int i = 0; i < 1000; ++i) {
    const Candidate a{static_cast<float>(s(rng)) * 0.5f, id(rng)}, b{static_cast<float>(s(rng)) * 0.5f, id(rng)};
    EXPECT_EQ(better(a, b), better(a.score, a.id, b.score, b.id));
  }
}

TEST(Ordering, CandidateLayoutIsSixteenBytes) {
  // Shared by host and device code and sent over MPI/NCCL as bytes.
  EXPECT_EQ(sizeof(Candidate), 16u);
  EXPECT_EQ(offsetof(Candidate, score), 0u);
  EXPECT_EQ(offsetof(Candidate, id), 8u);
}

TEST(Ordering, SortingWithTheRuleGivesAStrictTotalOrderOnDistinctIds) {
  // Low-entropy keys: many equal scores, ±0, ±inf, padding.
  std::vector<Candidate> v;
  const float scores[] = {0.0f, -0.0f, 1.0f, 1.0f, -1.0f, kInf, -kInf, 0.5f};
  std::int64_t id = 0;
  for (int rep = 0; rep < 6; ++rep)
    for (float s : scores) v.push_back(Candidate{s, (id++ * 37) % 101});
  v.push_back(pad_candidate());
  std::mt19937 rng(11);
  std::shuffle(v.begin(), v.end(), rng);
  std::sort(v.begin(), v.end(), [](const Candidate& a, const Candidate& b) { return better(a, b); });
  for (size_t i = 0; i + 1 < v.size(); ++i) {
    EXPECT_TRUE(better(v[i], v[i + 1])) << "positions " << i << " and " << i + 1;
    if (v[i].score == v[i + 1].score) EXPECT_LT(v[i].id, v[i + 1].id);
  }
  EXPECT_EQ(v.back().id, kPadId);
}

TEST(Ordering, OracleRestatementMatchesForEveryMetric) {
  // inner product / cosine: higher is better; l2 (reported as a distance): smaller is better.
  EXPECT_TRUE(oracle::better(Metric::kInnerProduct, 2.0, 9, 1.0, 0));
  EXPECT_TRUE(oracle::better(Metric::kCosine, 0.9, 9, 0.8, 0));
  EXPECT_TRUE(oracle::better(Metric::kL2, 1.0, 9, 2.0, 0));
  EXPECT_FALSE(oracle::better(Metric::kL2, 2.0, 0, 1.0, 9));
  for (Metric m : {Metric::kInnerProduct, Metric::kCosine, Metric::kL2}) {
    EXPECT_TRUE(oracle::better(m, 3.0, 1, 3.0, 2));
    EXPECT_FALSE(oracle::better(m, 3.0, 2, 3.0, 1));
    EXPECT_TRUE(oracle::better(m, 0.0, 1, -0.0, 2));
    EXPECT_FALSE(oracle::better(m, -0.0, 2, 0.0, 1));
  }
  // The float rule on l2 ranking scores (negated distances) agrees with the oracle on distances.
  EXPECT_EQ(better(-1.0f, 9, -2.0f, 0), oracle::better(Metric::kL2, 1.0, 9, 2.0, 0));
}

// ------------------------------------------------------------------------------ shard plan

struct PlanCase {
  std::int64_t n;
  int world;
};
std::ostream& operator<<(std::ostream& os, const PlanCase& c) { return os << "n=" << c.n << " P=" << c.world; }

class ShardPlan : public ::testing::TestWithParam<PlanCase> {};

TEST_P(ShardPlan, BalancedContiguousCover) {
  const auto [n, world] = GetParam();
  std::int64_t next = 0;
  for (int r = 0; r < world; ++r) {
    const RowRange rr = shard_rows(n, world, r);
    EXPECT_EQ(rr.lo, next) << "rank " << r;
    EXPECT_LE(rr.lo, rr.hi);
    // the first n % P ranks hold one row more
    EXPECT_EQ(rr.size(), n / world + (r < n % world ? 1 : 0)) << "rank " << r;
    next = rr.hi;
  }
  EXPECT_EQ(next, n);
}

// Cases: divisible, not divisible (remainder 1 and P-1), P > N (empty shards), N = 0, P = 1,
// a corpus too large for 32-bit row counts.
INSTANTIATE_TEST_SUITE_P(Cases, ShardPlan,
                         ::testing::Values(PlanCase{12, 4}, PlanCase{13, 4}, PlanCase{15, 4}, PlanCase{10, 3},
                                           PlanCase{3, 4}, PlanCase{1, 8}, PlanCase{0, 3}, PlanCase{7, 1},
                                           PlanCase{1000003, 7}, PlanCase{(1LL << 40) + 5, 6}));

TEST(ShardPlanExamples, NotDivisible) {
  EXPECT_EQ(shard_rows(10, 3, 0).lo, 0);
  EXPECT_EQ(shard_rows(10, 3, 0).hi, 4);
  EXPECT_EQ(shard_rows(10, 3, 1).lo, 4);
  EXPECT_EQ(shard_rows(10, 3, 1).hi, 7);
  EXPECT_EQ(shard_rows(10, 3, 2).lo, 7);
  EXPECT_EQ(shard_rows(10, 3, 2).hi, 10);
}

TEST(ShardPlanExamples, MoreRanksThanRowsGivesEmptyShardsAtTheEnd) {
  for (int r = 0; r < 3; ++r) EXPECT_EQ(shard_rows(3, 5, r).size(), 1) << r;
  for (int r = 3; r < 5; ++r) {
    EXPECT_EQ(shard_rows(3, 5, r).size(), 0) << r;
    EXPECT_EQ(shard_rows(3, 5, r).lo, 3) << r;
  }
}

TEST(ShardPlanExamples, InvalidArgumentsThrowWithTheValue) {
  EXPECT_THAT(error_of([] { shard_rows(10, 0, 0); }), HasSubstr("world size must be >= 1, got 0"));
  EXPECT_THAT(error_of([] { shard_rows(10, -2, 0); }), HasSubstr("got -2"));
  EXPECT_THAT(error_of([] { shard_rows(10, 2, 2); }), HasSubstr("rank 2 outside [0, 2)"));
  EXPECT_THAT(error_of([] { shard_rows(10, 2, -1); }), HasSubstr("rank -1 outside [0, 2)"));
  EXPECT_THAT(error_of([] { shard_rows(-1, 2, 0); }), HasSubstr("row count must be >= 0, got -1"));
  EXPECT_THROW(shard_rows(10, 0, 0), Error);
}

// ------------------------------------------------------------------------------ host merge

enum class MergeData { kRandom, kAllEqual, kManyTies, kPadding, kSignedZeros, kNegInfVsPad };

struct MergeCase {
  const char* name;
  int parts, batch, k;
  MergeData data;
};
std::ostream& operator<<(std::ostream& os, const MergeCase& c) {
  return os << c.name << " (P=" << c.parts << " B=" << c.batch << " K=" << c.k << ")";
}

// lists [parts, batch, k], each list best first, ids unique over all parts of a query.
std::vector<Candidate> make_lists(const MergeCase& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Candidate> lists(static_cast<size_t>(c.parts) * c.batch * c.k, pad_candidate());
  for (int b = 0; b < c.batch; ++b) {
    std::vector<std::int64_t> pool(static_cast<size_t>(c.parts) * c.k);
    std::iota(pool.begin(), pool.end(), 1000);
    std::shuffle(pool.begin(), pool.end(), rng);
    size_t next = 0;
    for (int p = 0; p < c.parts; ++p) {
      int real = c.k;
      if (c.data == MergeData::kPadding || c.data == MergeData::kNegInfVsPad)
        real = static_cast<int>(rng() % static_cast<std::uint64_t>(c.k + 1));  // 0..k real entries
      std::vector<Candidate> l;
      for (int j = 0; j < real; ++j) {
        float s = 0;
        switch (c.data) {
          case MergeData::kRandom: s = std::uniform_real_distribution<float>(-1, 1)(rng); break;
          case MergeData::kAllEqual: s = 0.5f; break;
          case MergeData::kManyTies: s = static_cast<float>(rng() % 3); break;
          case MergeData::kPadding: s = static_cast<float>(rng() % 5) - 2.0f; break;
          case MergeData::kSignedZeros: s = (rng() % 2) ? 0.0f : -0.0f; break;
          case MergeData::kNegInfVsPad: s = (rng() % 2) ? -kInf : 1.0f; break;
        }
        l.push_back(Candidate{s, pool[next++]});
      }
      std::sort(l.begin(), l.end(), [](const Candidate& x, const Candidate& y) { return better(x, y); });
      for (int j = 0; j < real; ++j) lists[(static_cast<size_t>(p) * c.batch + b) * c.k + j] = l[j];
    }
  }
  return lists;
}

// Reference: pool every candidate of a query, sort with the rule, keep k.
std::vector<Candidate> reference_merge(const std::vector<Candidate>& lists, int parts, int batch, int k) {
  std::vector<Candidate> out;
  for (int b = 0; b < batch; ++b) {
    std::vector<Candidate> all;
    for (int p = 0; p < parts; ++p)
      for (int j = 0; j < k; ++j) all.push_back(lists[(static_cast<size_t>(p) * batch + b) * k + j]);
    std::stable_sort(all.begin(), all.end(), [](const Candidate& x, const Candidate& y) { return better(x, y); });
    out.insert(out.end(), all.begin(), all.begin() + k);
  }
  return out;
}

void expect_same_candidates(const std::vector<Candidate>& a, const std::vector<Candidate>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id) << "slot " << i;
    EXPECT_EQ(std::signbit(a[i].score), std::signbit(b[i].score)) << "slot " << i;
    if (!(std::isinf(a[i].score) && std::isinf(b[i].score))) EXPECT_EQ(a[i].score, b[i].score) << "slot " << i;
  }
}

class HostMerge : public ::testing::TestWithParam<MergeCase> {};

TEST_P(HostMerge, EqualsSortOfAllCandidatesWhateverTheListOrder) {
  const MergeCase c = GetParam();
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    SCOPED_TRACE(seed);
    const auto lists = make_lists(c, seed);
    std::vector<Candidate> out(static_cast<size_t>(c.batch) * c.k);
    merge_topk_host(lists.data(), c.parts, c.batch, c.k, out.data());
    expect_same_candidates(out, reference_merge(lists, c.parts, c.batch, c.k));
    // Every query's output is best first.
    for (int b = 0; b < c.batch; ++b)
      for (int j = 0; j + 1 < c.k; ++j) {
        const Candidate& x = out[static_cast<size_t>(b) * c.k + j];
        const Candidate& y = out[static_cast<size_t>(b) * c.k + j + 1];
        EXPECT_TRUE(better(x, y) || (x.id == kPadId && y.id == kPadId)) << "query " << b << " slot " << j;
      }
    // Deterministic: reversing the order of the parts gives the same answer.
    std::vector<Candidate> rev(lists.size());
    for (int p = 0; p < c.parts; ++p)
      std::copy_n(lists.begin() + static_cast<std::ptrdiff_t>(p) * c.batch * c.k, c.batch * c.k,
                  rev.begin() + static_cast<std::ptrdiff_t>(c.parts - 1 - p) * c.batch * c.k);
    std::vector<Candidate> out2(out.size());
    merge_topk_host(rev.data(), c.parts, c.batch, c.k, out2.data());
    expect_same_candidates(out, out2);
  }
}

// Cases: one list (copy), random distinct scores, all scores equal (ids decide everything),
// three score values (many ties across lists), lists with 0..K real entries (padding, some
// lists all padding), ±0 (equal: ids decide), real candidates scoring -inf against padding.
INSTANTIATE_TEST_SUITE_P(
    Cases, HostMerge,
    ::testing::Values(MergeCase{"single_list", 1, 3, 5, MergeData::kRandom},
                      MergeCase{"random", 4, 5, 10, MergeData::kRandom},
                      MergeCase{"random_k1", 3, 7, 1, MergeData::kRandom},
                      MergeCase{"all_equal", 4, 3, 8, MergeData::kAllEqual},
                      MergeCase{"many_ties", 3, 6, 17, MergeData::kManyTies},
                      MergeCase{"padding", 4, 8, 6, MergeData::kPadding},
                      MergeCase{"signed_zeros", 3, 4, 9, MergeData::kSignedZeros},
                      MergeCase{"neg_inf_vs_pad", 5, 6, 4, MergeData::kNegInfVsPad},
                      MergeCase{"many_parts", 8, 2, 33, MergeData::kManyTies}),
    [](const ::testing::TestParamInfo<MergeCase>& i) { return std::string(i.param.name); });

TEST(HostMergeExamples, AllPaddingGivesPadding) {
  std::vector<Candidate> lists(3 * 2 * 4, pad_candidate()), out(2 * 4, Candidate{1.0f, 1});
  merge_topk_host(lists.data(), 3, 2, 4, out.data());
  for (const auto& c : out) EXPECT_EQ(c.id, kPadId);
}

TEST(HostMergeExamples, TieBetweenListsGoesToTheSmallerGlobalId) {
  // Part 0 holds id 9, part 1 holds id 2, both scoring 1.0: id 2 first.
  std::vector<Candidate> lists = {{1.0f, 9}, {0.0f, 10}, {1.0f, 2}, {-1.0f, 3}};
  std::vector<Candidate> out(2);
  merge_topk_host(lists.data(), 2, 1, 2, out.data());
  EXPECT_EQ(out[0].id, 2);
  EXPECT_EQ(out[1].id, 9);
}

}  // namespace
}  // namespace shardtopk
