// Score-range admission (src/index/admission.hpp) and the CPU engine's buffer plan: the bound
// B = FLT_MAX/2 on both sides, the float64 norms, the start-up refusal of unboundable l2 rows,
// and the refusal of buffers larger than the machine (naming the buffer), without allocating.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <vector>

#include "index/admission.hpp"
#include "shardtopk/engine.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

void admit(Metric m, const NormSummary& corpus, const float* queries, int batch, std::int64_t dim) {
  admit_query_values(m, corpus, queries, batch, dim);
}

TEST(Admission, BoundIsHalfOfFltMaxAndCoversTheAccumulationFactor) {
  EXPECT_DOUBLE_EQ(kScoreBound, 1.7014117331926443e38);
  // (1 + 2^-8)^2 · (1 + 2^-24)^(D+5) ≤ 2 at the largest admitted dimension
  const double factor = std::pow(1.0 + std::ldexp(1.0, -8), 2) * std::pow(1.0 + std::ldexp(1.0, -24), kMaxBoundedDim + 5);
  EXPECT_LE(factor, 2.0);
  EXPECT_LE(kScoreBound * factor, static_cast<double>(FLT_MAX));
}

TEST(Admission, ShardNormsAreFloat64AndNameTheGlobalRow) {
  const std::vector<float> rows = {1e20f, -1e20f, 3, 4, 3e38f, 3e38f};  // the last: ‖x‖² overflows float32 and float64 does not
  const NormSummary s = shard_norms(rows.data(), 3, 2, 100);
  EXPECT_EQ(s.row, 102);
  EXPECT_NEAR(s.max_norm, std::sqrt(2.0) * 3e38, 1e32);
  EXPECT_EQ(shard_norms(rows.data(), 0, 2, 0).row, -1);
  // combine: largest wins, equal norms: smaller row, empty shards ignored
  const NormSummary c = combine_norms({NormSummary{5, 7}, NormSummary{}, NormSummary{5, 3}, NormSummary{2, 1}});
  EXPECT_EQ(c.row, 3);
  EXPECT_EQ(c.max_norm, 5);
}

TEST(Admission, InnerProductAdmitsUpToTheBoundAndRefusesBeyond) {
  const NormSummary corpus{2e19, 4};
  const double qmax = max_query_norm(Metric::kInnerProduct, corpus);
  EXPECT_DOUBLE_EQ(qmax, kScoreBound / 2e19);
  const float below = static_cast<float>(qmax * 0.999 / std::sqrt(2.0)), above = static_cast<float>(qmax * 1.001 / std::sqrt(2.0));
  const std::vector<float> ok = {below, below, 1, 0}, bad = {1, 0, above, -above};
  EXPECT_NO_THROW(admit(Metric::kInnerProduct, corpus, ok.data(), 2, 2));
  const std::string msg = test::error_of([&] { admit(Metric::kInnerProduct, corpus, bad.data(), 2, 2); });
  EXPECT_THAT(msg, AllOf(HasSubstr("query 1 of the batch"), HasSubstr("(id 4)"), HasSubstr("1.70141e+38"),
                         HasSubstr("largest admissible query norm is 8.50706e+18")))
      << msg;
  // cosine: scores are in [-1, 1] whatever the raw norms
  EXPECT_NO_THROW(admit(Metric::kCosine, corpus, bad.data(), 2, 2));
}

// The per-batch admission in one pass: non-finite values first (the first one in row-major
// order, named by query, column and value, also when another query's norm is too large), then
// the norm bound; cosine checks only finiteness.
TEST(Admission, OnePassNamesTheFirstNonFiniteValueThenTheNormBound) {
  const NormSummary corpus{1e18, 4};
  const float inf = INFINITY, nan = NAN;
  const float big = static_cast<float>(max_query_norm(Metric::kInnerProduct, corpus) * 1.001);
  const std::vector<float> ok = {1, 2, 3, 4, -5, 6};
  for (Metric m : {Metric::kInnerProduct, Metric::kL2, Metric::kCosine}) {
    EXPECT_NO_THROW(admit_query_values(m, corpus, ok.data(), 2, 3)) << to_string(m);
    // query 0 too large; non-finite: query 1 column 2, query 2 column 0 (row-major: query 1 first)
    const std::vector<float> bad = {big, 0, 0, 1, 2, nan, inf, 3, 4};
    EXPECT_EQ(test::error_of([&] { admit_query_values(m, corpus, bad.data(), 3, 3); }),
              "query 1 of the batch has a non-finite value (nan) at column 2")
        << to_string(m);
  }
  const std::vector<float> large = {1, 0, 0, big, 0, 0};
  EXPECT_THAT(test::error_of([&] { admit_query_values(Metric::kInnerProduct, corpus, large.data(), 2, 3); }),
              AllOf(HasSubstr("query 1 of the batch has norm"), HasSubstr("(id 4)")));
  EXPECT_NO_THROW(admit_query_values(Metric::kCosine, corpus, large.data(), 2, 3));
}

// The pass checks the range from ‖q‖ ≤ √dim · max|q_d|; a query whose bound is too large but
// whose float64 norm is not must still be admitted (its norm decides), at both metrics' edges.
TEST(Admission, TheMaxBoundOnlyShortcutsTheFloat64Norm) {
  const NormSummary corpus{1e18, 4};
  for (Metric m : {Metric::kInnerProduct, Metric::kL2}) {
    const double qmax = max_query_norm(m, corpus);
    // one large element: √4 · max = 1.8 qmax, but ‖q‖ ≈ 0.9 qmax
    const float a = static_cast<float>(0.9 * qmax);
    const std::vector<float> spiky = {0, a, a * 1e-3f, 0};
    EXPECT_NO_THROW(admit(m, corpus, spiky.data(), 1, 4)) << to_string(m);
    // all elements equal: the bound is the norm; 0.999 qmax in, 1.001 qmax out
    const float in = static_cast<float>(0.999 * qmax / 2), out = static_cast<float>(1.001 * qmax / 2);
    const std::vector<float> flat = {in, -in, in, -in, out, out, -out, out};
    EXPECT_NO_THROW(admit(m, corpus, flat.data(), 1, 4)) << to_string(m);
    EXPECT_THAT(test::error_of([&] { admit(m, corpus, flat.data(), 2, 4); }), HasSubstr("query 1 of the batch has norm"))
        << to_string(m);
  }
}

TEST(Admission, L2AdmitsUpToTheBoundAndRefusesUnboundableRowsAtStartUp) {
  const NormSummary corpus{1e19, 0};
  const double qmax = max_query_norm(Metric::kL2, corpus);
  EXPECT_NEAR(qmax, std::sqrt(kScoreBound) - 1e19, 1e6);
  const std::vector<float> ok = {static_cast<float>(qmax * 0.999), 0}, bad = {static_cast<float>(qmax * 1.001), 0};
  EXPECT_NO_THROW(admit(Metric::kL2, corpus, ok.data(), 1, 2));
  EXPECT_THAT(test::error_of([&] { admit(Metric::kL2, corpus, bad.data(), 1, 2); }),
              HasSubstr("(|q| + max|x|)^2"));
  // a row whose own squared norm exceeds B leaves no admissible query: refused at start-up
  const double edge = std::sqrt(kScoreBound);
  EXPECT_NO_THROW(check_corpus_norms(Metric::kL2, NormSummary{edge * 0.999, 9}, 2, "corpus row"));
  EXPECT_THAT(test::error_of([&] { check_corpus_norms(Metric::kL2, NormSummary{edge * 1.001, 9}, 2, "corpus row"); }),
              AllOf(HasSubstr("corpus row 9 has norm"), HasSubstr("no l2 distance")));
  // inner product: a large row still admits small queries
  EXPECT_NO_THROW(check_corpus_norms(Metric::kInnerProduct, NormSummary{1e30, 9}, 2, "corpus row"));
  EXPECT_THAT(test::error_of([&] { check_corpus_norms(Metric::kInnerProduct, NormSummary{1, 0}, kMaxBoundedDim + 1, "c"); }),
              HasSubstr("dimension 10000001"));
}

// An engine built on inputs just below the bound gives finite scores in the float64 order.
TEST(Admission, EngineScoresJustBelowTheBoundAreFiniteAndCorrect) {
  const std::int64_t dim = 24, n = 37;
  std::vector<float> corpus = test::random_floats(n * dim, 81, -1, 1);
  for (float& v : corpus) v *= 1e18f;
  const std::vector<std::int64_t> ids = test::iota_ids(n);
  for (Metric m : {Metric::kInnerProduct, Metric::kL2}) {
    const NormSummary ns = shard_norms(corpus.data(), n, dim, 0);
    std::vector<float> q = test::random_floats(3 * dim, 82, -1, 1);
    double qn = 0;
    for (std::int64_t d = 0; d < dim; ++d) qn += double(q[d]) * q[d];
    const double scale = max_query_norm(m, ns) * 0.995 / std::sqrt(qn);
    for (std::int64_t d = 0; d < dim; ++d) q[d] = static_cast<float>(q[d] * scale);  // query 0 at the edge
    admit(m, ns, q.data(), 3, dim);
    auto e = make_cpu_engine(ShardInput{corpus.data(), n, dim, ids.data()}, m, Dtype::kFloat32, EngineLimits{4, 16}, EngineOptions{2});
    const test::Answer got = test::run_engine(*e, q, 3, 16, 3);
    for (float s : got.scores) EXPECT_TRUE(std::isfinite(s)) << s;
    test::expect_within_tolerance(m, corpus, n, nullptr, q, 3, dim, 16, got, to_string(m) + " at the bound");
  }
}

TEST(CpuEngineBuffers, PlanEqualsResidentBytesAndHugeLimitsAreRefusedBeforeAllocating) {
  const std::vector<float> rows = test::small_ints(11 * 5, 83);
  const std::vector<std::int64_t> ids = test::iota_ids(11);
  for (Dtype dt : {Dtype::kFloat32, Dtype::kFloat16}) {
    const EngineLimits lim{3, 7};
    auto e = make_cpu_engine(ShardInput{rows.data(), 11, 5, ids.data()}, Metric::kL2, dt, lim, EngineOptions{3});
    EXPECT_EQ(e->info().resident_bytes, cpu_engine_host_bytes(11, 5, dt, lim, 3)) << to_string(dt);
  }
  const EngineLimits huge{1 << 20, 1 << 20};
  const std::string msg = test::error_of(
      [&] { make_cpu_engine(ShardInput{rows.data(), 11, 5, ids.data()}, Metric::kL2, Dtype::kFloat32, huge, EngineOptions{2}); });
  // 2 threads: selection buffers [2, 2^20, 2^21+32] × 16 B = 70369817919488 bytes are the largest
  EXPECT_THAT(msg, AllOf(HasSubstr("need 70369817919488 bytes"), HasSubstr("selection buffer ["),
                         HasSubstr(std::to_string(cpu_engine_host_bytes(11, 5, Dtype::kFloat32, huge, 2)) + " bytes"),
                         HasSubstr("lower search.batch_max or search.k_max")))
      << msg;
  EXPECT_EQ(cpu_engine_host_bytes(1, 1, Dtype::kFloat32, EngineLimits{1 << 30, 1 << 30}, 1 << 20), UINT64_MAX);
}

}  // namespace
}  // namespace shardtopk
