// Admission of search batches (shardtopk/search_batch.hpp): one check, one wording per error, the
// distinct filters found once and composed batches; score-range admission (src/index/admission.hpp)
// and the CPU engine's buffer plan: the bound B = FLT_MAX/2 on both sides, the float64 norms, the
// start-up refusal of unboundable l2 rows, and the refusal of buffers larger than the machine
// (naming the buffer), without allocating.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "index/admission.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/search_batch.hpp"
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

// shard_norms takes rows four at a time (independent sums, for speed): each norm must keep
// row_norm's bits, and the largest its first row, for any row count and dimension.
TEST(Admission, ShardNormsKeepRowNormsBitsAndTheFirstLargestRow) {
  for (std::int64_t dim : {1, 3, 4, 7, 768, 770}) {
    for (std::int64_t n : {1, 2, 4, 5, 8, 11}) {
      std::vector<float> r = test::random_floats(n * dim, static_cast<unsigned>(31 + dim + n));
      for (float& x : r) x *= 1e3f;  // wide magnitudes: the order of the additions shows in the bits
      std::vector<double> norm(static_cast<size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) norm[i] = row_norm(r.data() + i * dim, dim);
      std::int64_t top = std::max_element(norm.begin(), norm.end()) - norm.begin();  // the first largest
      if (top + 1 < n) {  // a tie after it: the first still wins
        std::copy(r.begin() + top * dim, r.begin() + (top + 1) * dim, r.begin() + (n - 1) * dim);
        norm[n - 1] = norm[top];
      }
      const NormSummary s = shard_norms(r.data(), n, dim, 1000, 2);
      EXPECT_EQ(s.row, 1000 + top) << "dim " << dim << " rows " << n;
      EXPECT_EQ(s.max_norm, norm[top]) << "dim " << dim << " rows " << n;
      for (std::int64_t i = 0; i < n; ++i) {  // each row's norm: four copies of it, and its row alone
        std::vector<float> four;
        for (int c = 0; c < 4; ++c) four.insert(four.end(), r.begin() + i * dim, r.begin() + (i + 1) * dim);
        EXPECT_EQ(shard_norms(four.data(), 4, dim, 0, 1).max_norm, norm[i]) << "row " << i << " dim " << dim;
        EXPECT_EQ(shard_norms(r.data() + i * dim, 1, dim, 0, 1).max_norm, norm[i]) << "row " << i << " dim " << dim;
      }
    }
  }
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
  EXPECT_THAT(msg, AllOf(HasSubstr("of 70369817919488 bytes"), HasSubstr("selection buffer ["),
                         HasSubstr("need " + std::to_string(cpu_engine_host_bytes(11, 5, Dtype::kFloat32, huge, 2)) +
                                   " bytes"),
                         HasSubstr("lower search.batch_max (1048576) or search.k_max (1048576)")))
      << msg;
  EXPECT_EQ(cpu_engine_host_bytes(1, 1, Dtype::kFloat32, EngineLimits{1 << 30, 1 << 30}, 1 << 20), UINT64_MAX);
}

// ------------------------------------------------------------------------------ batches

SearchLimits limits(Metric m = Metric::kInnerProduct) {
  SearchLimits l;
  l.dim = 3;
  l.metric = m;
  l.k_max = 16;
  l.k_rows = 40;
  l.batch_max = 4;
  l.max_filters = 2;
  l.schema = {AttributeSpec{"tenant", AttributeType::kInt64}};
  l.max_row_norm = 1e18;
  l.max_row_norm_row = 7;
  return l;
}

// Every refusal of a batch, whichever check finds it, with its one wording; nothing is admitted.
TEST(AdmitBatch, EachRefusalHasOneWordingNamingTheValue) {
  const Admission a(limits());
  const std::vector<float> q = {1, 2, 3, 4, 5, 6};
  using test::error_of;
  EXPECT_EQ(error_of([&] { a.admit(q.data(), 2, 0); }), "k=0 out of range: allowed 1 .. 16");
  EXPECT_EQ(error_of([&] { a.admit(q.data(), 2, 17); }), "k=17 out of range: allowed 1 .. 16 (search.k_max)");
  SearchLimits few = limits();
  few.k_rows = 12;
  EXPECT_EQ(error_of([&] { Admission(few).admit(q.data(), 2, 13); }),
            "k=13 out of range: allowed 1 .. 12 (the corpus rows)");
  EXPECT_EQ(error_of([&] { a.admit(q.data(), 0, 3); }),
            "batch of 0 queries out of range: allowed 1 .. 4 (search.batch_max)");
  EXPECT_EQ(error_of([&] { a.admit(q.data(), 5, 3); }),
            "batch of 5 queries out of range: allowed 1 .. 4 (search.batch_max)");
  EXPECT_EQ(error_of([&] { a.admit(nullptr, 2, 3); }), "no queries given");
  std::vector<float> bad = q;
  bad[4] = NAN;
  EXPECT_EQ(error_of([&] { a.admit(bad.data(), 2, 3); }), "query 1 of the batch has a non-finite value (nan) at column 1");
  const std::vector<float> zero = {1, 2, 3, 0, -0.0f, 0};
  EXPECT_EQ(error_of([&] { Admission(limits(Metric::kCosine)).admit(zero.data(), 2, 3); }),
            "query 1 of the batch has zero norm and cannot be scored by cosine similarity");
  EXPECT_NO_THROW(a.admit(zero.data(), 2, 3)) << "a zero query has scores under inner product";
  const std::vector<float> big = {1, 2, 3, 1e21f, 0, 0};
  EXPECT_THAT(error_of([&] { a.admit(big.data(), 2, 3); }),
              AllOf(HasSubstr("query 1 of the batch has norm"), HasSubstr("(id 7)"), HasSubstr("Score range")));
  // filters: one that names an attribute the schema does not have, and one distinct filter too many
  const FilterProgram other = parse_filter(
      R"({"eq": {"year": 1.5}})", {AttributeSpec{"x", AttributeType::kInt64}, AttributeSpec{"year", AttributeType::kFloat64}});
  const FilterProgram* f1[2] = {&other, nullptr};
  EXPECT_THAT(error_of([&] { a.admit(q.data(), 2, 3, f1); }), HasSubstr("filter: program does not fit the attribute table"));
  const FilterProgram p1 = parse_filter(R"({"eq": {"tenant": 1}})", limits().schema);
  const FilterProgram p2 = parse_filter(R"({"eq": {"tenant": 2}})", limits().schema);
  const FilterProgram p3 = parse_filter(R"({"ids_in": [4]})", limits().schema);
  const std::vector<float> q3(9, 1.0f);
  const FilterProgram* three[3] = {&p1, &p2, &p3};
  EXPECT_EQ(error_of([&] { a.admit(q3.data(), 3, 3, three); }),
            "the batch holds more than 2 distinct filters (search.max_filters)");
  // device queries are the CUDA engine's
  EXPECT_THAT(error_of([&] { a.admit_device(q.data(), nullptr, 2, 3); }), HasSubstr("need the CUDA engine"));
  // bounds and stats are admitted on every engine
  QueryBounds after[2];
  after[1].has_after = true;
  EXPECT_NO_THROW(a.admit(q.data(), 2, 3, nullptr, after, true));
}

// The batch's distinct programs, found once: equal programs (not only the same object) once,
// programs that pass every row left out, each query's index into them.
TEST(AdmitBatch, DistinctFiltersOnceAndEachQuerysProgram) {
  const Admission a(limits());
  const std::vector<float> q(12, 1.0f);
  const FilterProgram p1 = parse_filter(R"({"ids_in": [1, 9]})", limits().schema);
  const FilterProgram p1_again = parse_filter(R"({"ids_in": [9, 1, 1]})", limits().schema);
  const FilterProgram all = parse_filter(R"({"all": []})", limits().schema);
  const FilterProgram p2 = parse_filter(R"({"eq": {"tenant": 3}})", limits().schema);
  const FilterProgram* f[4] = {&p1, &all, &p1_again, &p2};
  const SearchBatch b = a.admit(q.data(), 4, 5, f);
  EXPECT_EQ(b.size(), 4);
  EXPECT_EQ(b.k(), 5);
  EXPECT_EQ(b.queries(), q.data());
  ASSERT_EQ(b.filter_count(), 2);
  EXPECT_EQ(b.filter_programs()[0], &p1);
  EXPECT_EQ(b.filter_programs()[1], &p2);
  EXPECT_EQ(std::vector<std::int32_t>(b.query_program(), b.query_program() + 4), (std::vector<std::int32_t>{0, -1, 0, 1}));
  const FilterProgram* none[4] = {nullptr, &all, nullptr, nullptr};
  const SearchBatch u = a.admit(q.data(), 4, 5, none);
  EXPECT_EQ(u.filter_count(), 0);
  EXPECT_EQ(u.query_program(), nullptr);
}

// Requests composed into one batch as admitted: queries in order, filters merged (equal ones once),
// and a request that does not fit (another k, too many rows, one filter too many) left out whole.
TEST(AdmitBatch, ComposerMergesAdmittedRequestsWithoutCheckingThemAgain) {
  const Admission a(limits());
  const FilterProgram p1 = parse_filter(R"({"eq": {"tenant": 1}})", limits().schema);
  const FilterProgram p1_again = parse_filter(R"({"eq": {"tenant": 1}})", limits().schema);
  const FilterProgram p2 = parse_filter(R"({"eq": {"tenant": 2}})", limits().schema);
  const FilterProgram p3 = parse_filter(R"({"eq": {"tenant": 3}})", limits().schema);
  const std::vector<float> r1 = {1, 1, 1, 2, 2, 2}, r2 = {3, 3, 3}, r3 = {4, 4, 4}, r4 = {5, 5, 5};
  const FilterProgram* f1[2] = {&p1, &p1};
  const FilterProgram* f3[1] = {&p2};
  const FilterProgram* f4[1] = {&p3};
  const FilterProgram* f5[1] = {&p1_again};
  const SearchBatch a1 = a.admit(r1.data(), 2, 3, f1), a2 = a.admit(r2.data(), 1, 3), a3 = a.admit(r3.data(), 1, 3, f3),
                    other_k = a.admit(r2.data(), 1, 4), a4 = a.admit(r4.data(), 1, 3, f4),
                    a5 = a.admit(r4.data(), 1, 3, f5);
  BatchComposer c(5, 2, 3);
  EXPECT_TRUE(c.add(a1));
  EXPECT_FALSE(c.add(other_k)) << "another k";
  EXPECT_TRUE(c.add(a2));
  EXPECT_TRUE(c.add(a3));
  EXPECT_FALSE(c.add(a4)) << "a third distinct filter (max_filters 2)";
  EXPECT_FALSE(c.add(a1)) << "6 rows of batch_max 5";
  EXPECT_TRUE(c.add(a5)) << "p1 again: already in the batch";
  EXPECT_EQ(c.size(), 5);
  const SearchBatch& b = c.batch();
  ASSERT_EQ(b.size(), 5);
  EXPECT_EQ(b.k(), 3);
  EXPECT_EQ(std::vector<float>(b.queries(), b.queries() + 15),
            (std::vector<float>{1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5}));
  ASSERT_EQ(b.filter_count(), 2);
  EXPECT_EQ(b.filter_programs()[0], &p1);
  EXPECT_EQ(b.filter_programs()[1], &p2);
  EXPECT_EQ(std::vector<std::int32_t>(b.query_program(), b.query_program() + 5),
            (std::vector<std::int32_t>{0, 0, -1, 1, 0}));
  c.clear();
  EXPECT_TRUE(c.add(other_k));
  EXPECT_EQ(c.batch().k(), 4);
  EXPECT_EQ(c.batch().queries(), other_k.queries()) << "one request: its queries, not a copy";
  EXPECT_EQ(c.batch().filter_count(), 0);
  EXPECT_EQ(c.batch().query_program(), nullptr);
}

// Programs are told apart by all of their constants, not by the digest that finds candidates
// quickly (sizes, instructions, the first and last four constants): two id lists alike at both
// ends are two filters, in an admitted batch and in a composed one, also after a request the
// composer turned away.
TEST(AdmitBatch, ProgramsAlikeAtBothEndsAreDistinct) {
  const Admission a(limits());
  const auto list = [](int middle) {
    std::string s = R"({"ids_in": [1, 2, 3, 4, )" + std::to_string(middle) + ", 1000, 1001, 1002, 1003]}";
    return parse_filter(s, limits().schema);
  };
  const FilterProgram p1 = list(100), p2 = list(200), p1_again = list(100), p3 = list(300);
  const std::vector<float> q(12, 1.0f);
  const FilterProgram* f[4] = {&p1, &p2, &p1_again, nullptr};
  const SearchBatch b = a.admit(q.data(), 4, 5, f);
  ASSERT_EQ(b.filter_count(), 2);
  EXPECT_EQ(b.filter_programs()[0], &p1);
  EXPECT_EQ(b.filter_programs()[1], &p2);
  EXPECT_EQ(std::vector<std::int32_t>(b.query_program(), b.query_program() + 4), (std::vector<std::int32_t>{0, 1, 0, -1}));

  const FilterProgram* g1[1] = {&p1};
  const FilterProgram* g2[1] = {&p2};
  const FilterProgram* g3[1] = {&p3};
  const FilterProgram* g4[1] = {&p1_again};
  const SearchBatch r1 = a.admit(q.data(), 1, 5, g1), r2 = a.admit(q.data(), 1, 5, g2), r3 = a.admit(q.data(), 1, 5, g3),
                    r4 = a.admit(q.data(), 1, 5, g4);
  BatchComposer c(4, 2, 3);
  EXPECT_TRUE(c.add(r1));
  EXPECT_TRUE(c.add(r2));
  EXPECT_FALSE(c.add(r3)) << "a third distinct filter (max_filters 2), alike at both ends";
  EXPECT_TRUE(c.add(r4)) << "p1 again";
  const SearchBatch& out = c.batch();
  ASSERT_EQ(out.filter_count(), 2);
  EXPECT_EQ(std::vector<std::int32_t>(out.query_program(), out.query_program() + 3), (std::vector<std::int32_t>{0, 1, 0}));
}

// A batch admitted against one norm bound is checked again only when writes have raised it
// since (the one compare otherwise), with admission's own wording; a lower bound keeps it.
TEST(AdmitBatch, ANormBoundRaisedSinceAdmissionIsCheckedAgain) {
  Admission a(limits());
  const std::vector<float> q = {1e19f, 0, 0};  // reach 1e37 against 1e18: admitted
  const SearchBatch b = a.admit(q.data(), 1, 3);
  EXPECT_NO_THROW(a.recheck_norms(b));
  a.set_norm_bound(1e17, 2);
  EXPECT_NO_THROW(a.recheck_norms(b)) << "a lower bound admits what a higher one did";
  a.set_norm_bound(1e20, 9);  // reach 1e39 > B
  EXPECT_THAT(test::error_of([&] { a.recheck_norms(b); }),
              AllOf(HasSubstr("query 0 of the batch has norm"), HasSubstr("(id 9)")));
  EXPECT_THAT(test::error_of([&] { a.admit(q.data(), 1, 3); }), HasSubstr("query 0 of the batch has norm"));
  EXPECT_EQ(a.limits().max_row_norm_row, 9);
}

}  // namespace
}  // namespace shardtopk
