// The CPU engine against the float64 oracle (DESIGN.md "Correctness terms"), batch and thread
// independence (invariant 3), storage dtypes on the same rounded values, padding, ties, and the
// real bge-m3 vectors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "shardtopk/engine.hpp"
#include "shardtopk/merge.hpp"
#include "shardtopk/error.hpp"
#include "tools/oracle.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using test::Answer;

enum class Data { kRandom, kSmallInt };

struct EngineCase {
  std::string name;
  Metric metric;
  Dtype dtype;
  Data data;
  std::int64_t n, dim, nq;
  int k, batch, threads;
  bool shuffled_ids = false;  // global ids a shuffled, offset permutation (ties break on them)
};
std::ostream& operator<<(std::ostream& os, const EngineCase& c) {
  return os << c.name << ": " << to_string(c.metric) << " " << to_string(c.dtype)
            << (c.data == Data::kSmallInt ? " small-int" : " random") << " N=" << c.n << " D=" << c.dim
            << " Q=" << c.nq << " K=" << c.k << " batch=" << c.batch << " threads=" << c.threads
            << (c.shuffled_ids ? " shuffled ids" : "");
}

// Everything one engine comparison needs, built the way the index builds it.
struct Fixture {
  std::vector<float> corpus_raw, queries;  // as the user gives them
  std::vector<float> shard;                // what the engine receives (cosine: normalised rows)
  std::vector<std::int64_t> ids;
  // What the oracle compares against: the values the engine actually scores.
  Metric oracle_metric;
  std::vector<float> oracle_corpus, oracle_queries;
};

Fixture make_fixture(Metric m, Dtype dt, Data data, std::int64_t n, std::int64_t dim, std::int64_t nq, bool shuffled,
                     std::uint64_t seed = 1) {
  Fixture f;
  f.corpus_raw = data == Data::kSmallInt ? test::small_ints(n * dim, seed) : test::random_floats(n * dim, seed);
  f.queries = data == Data::kSmallInt ? test::small_ints(nq * dim, seed + 100) : test::random_floats(nq * dim, seed + 100);
  if (m == Metric::kCosine) {
    test::fix_zero_rows(&f.corpus_raw, dim);
    test::fix_zero_rows(&f.queries, dim);
  }
  f.ids = test::iota_ids(n, shuffled ? 1000 : 0);
  if (shuffled) {
    std::mt19937_64 rng(seed + 7);
    std::shuffle(f.ids.begin(), f.ids.end(), rng);
  }
  f.shard = m == Metric::kCosine ? test::normalized(f.corpus_raw, n, dim) : f.corpus_raw;
  if (dt == Dtype::kFloat32) {
    // float32: the oracle sees the user's vectors (cosine divides by float64 norms itself).
    f.oracle_metric = m;
    f.oracle_corpus = f.corpus_raw;
    f.oracle_queries = f.queries;
  } else if (m == Metric::kCosine) {
    // float16/bfloat16 cosine: the engine scores the inner product of the rounded unit rows with
    // the unit query; the oracle scores exactly those values in float64.
    f.oracle_metric = Metric::kInnerProduct;
    f.oracle_corpus = test::round_to(dt, f.shard);
    f.oracle_queries = test::normalized(f.queries, nq, dim);
  } else {
    f.oracle_metric = m;
    f.oracle_corpus = test::round_to(dt, f.shard);
    f.oracle_queries = f.queries;
  }
  return f;
}

std::unique_ptr<Engine> engine_for(const Fixture& f, Metric m, Dtype dt, std::int64_t n, std::int64_t dim, int threads,
                                   int batch_max, int k_max) {
  return make_cpu_engine(ShardInput{f.shard.data(), n, dim, f.ids.data()}, m, dt,
                         EngineLimits{batch_max, k_max}, EngineOptions{threads});
}

// ------------------------------------------------------------------------------ engine vs oracle

class CpuEngineVsOracle : public ::testing::TestWithParam<EngineCase> {};

TEST_P(CpuEngineVsOracle, MatchesTheFloat64Oracle) {
  const EngineCase c = GetParam();
  const Fixture f = make_fixture(c.metric, c.dtype, c.data, c.n, c.dim, c.nq, c.shuffled_ids);
  auto e = engine_for(f, c.metric, c.dtype, c.n, c.dim, c.threads, c.batch, c.k);
  const EngineInfo info = e->info();
  EXPECT_EQ(info.name, "cpu");
  EXPECT_EQ(info.space, MemSpace::kHost);
  EXPECT_EQ(info.rows, c.n);
  EXPECT_EQ(info.dim, c.dim);
  EXPECT_EQ(info.dtype, c.dtype);
  EXPECT_EQ(e->stream(), nullptr);
  const Answer got = test::run_engine(*e, f.queries, c.nq, c.k, c.batch);
  const std::int64_t* ids = f.ids.data();
  if (c.data == Data::kSmallInt && c.metric != Metric::kCosine) {
    // exact in float32: ids equal the oracle's, ties included, and scores equal
    test::expect_exact(f.oracle_metric, f.oracle_corpus, c.n, ids, f.oracle_queries, c.nq, c.dim, c.k, got, c.name);
  } else {
    test::expect_within_tolerance(f.oracle_metric, f.oracle_corpus, c.n, ids, f.oracle_queries, c.nq, c.dim, c.k, got,
                                  c.name);
  }
}

std::vector<EngineCase> engine_cases() {
  const Metric ip = Metric::kInnerProduct, cos = Metric::kCosine, l2 = Metric::kL2;
  const Dtype f32 = Dtype::kFloat32, f16 = Dtype::kFloat16, bf16 = Dtype::kBFloat16;
  const Data rnd = Data::kRandom, si = Data::kSmallInt;
  std::vector<EngineCase> v = {
      // random data, every metric and storage dtype (tolerance; the oracle on the rounded values)
      {"ip_f32_random", ip, f32, rnd, 500, 64, 12, 10, 12, 2},
      {"cos_f32_random", cos, f32, rnd, 500, 64, 12, 10, 12, 2},
      {"l2_f32_random", l2, f32, rnd, 500, 64, 12, 10, 12, 2},
      {"ip_f16_random", ip, f16, rnd, 500, 48, 9, 16, 4, 2},
      {"cos_f16_random", cos, f16, rnd, 500, 48, 9, 16, 4, 2},
      {"l2_f16_random", l2, f16, rnd, 500, 48, 9, 16, 4, 2},
      {"ip_bf16_random", ip, bf16, rnd, 500, 48, 9, 16, 5, 3},
      {"cos_bf16_random", cos, bf16, rnd, 500, 48, 9, 16, 5, 3},
      {"l2_bf16_random", l2, bf16, rnd, 500, 48, 9, 16, 5, 3},
      // small integers: exact in float32, many ties -> exact ids required (float16/bfloat16
      // store small integers exactly, so the same holds for them)
      {"ip_f32_smallint", ip, f32, si, 400, 12, 20, 30, 7, 2},
      {"l2_f32_smallint", l2, f32, si, 400, 12, 20, 30, 7, 2},
      {"ip_f16_smallint", ip, f16, si, 400, 12, 20, 30, 20, 1},
      {"l2_f16_smallint", l2, f16, si, 400, 12, 20, 30, 3, 3},
      {"ip_bf16_smallint", ip, bf16, si, 400, 12, 20, 30, 1, 2},
      {"l2_bf16_smallint", l2, bf16, si, 400, 12, 20, 30, 64, 2},
      {"ip_smallint_shuffled_ids", ip, f32, si, 300, 4, 10, 40, 5, 3, true},
      {"l2_smallint_shuffled_ids", l2, f16, si, 300, 4, 10, 40, 4, 2, true},
      {"cos_smallint", cos, f32, si, 300, 6, 10, 20, 4, 2},
      // sizes: N = 1, K = 1, K = N, K = 1024 with N >= 1024, more threads than rows
      {"n1_k1", ip, f32, rnd, 1, 16, 5, 1, 5, 2},
      {"n1_k1_l2_smallint", l2, f32, si, 1, 3, 5, 1, 2, 1},
      {"k1", l2, f32, rnd, 300, 20, 9, 1, 9, 2},
      {"k_equals_n", ip, f32, si, 57, 9, 6, 57, 6, 2},
      {"k_equals_n_l2", l2, bf16, rnd, 57, 9, 6, 57, 6, 3},
      {"k1024_random", ip, f32, rnd, 1100, 9, 3, 1024, 3, 2},
      {"k1024_smallint", l2, f32, si, 1030, 5, 5, 1024, 5, 2},
      {"threads_exceed_rows", ip, f32, si, 2, 5, 4, 2, 4, 3},
      {"rows_fewer_than_tile", l2, f32, rnd, 7, 10, 9, 7, 9, 2},
  };
  // D not a multiple of 8 (and around it), exact and within tolerance
  for (std::int64_t d : {1, 3, 7, 8, 9, 15, 16, 17, 33, 100}) {
    v.push_back({"ip_smallint_d" + std::to_string(d), ip, f32, si, 150, d, 9, 12, 9, 2});
    v.push_back({"l2_f16_smallint_d" + std::to_string(d), l2, f16, si, 150, d, 9, 12, 5, 2});
    v.push_back({"cos_random_d" + std::to_string(d), cos, f32, rnd, 150, d, 9, 12, 9, 2});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuEngineVsOracle, ::testing::ValuesIn(engine_cases()),
                         [](const ::testing::TestParamInfo<EngineCase>& i) { return i.param.name; });

// ------------------------------------------------------------------------------ invariance

struct InvarianceCase {
  Metric metric;
  Dtype dtype;
};
std::ostream& operator<<(std::ostream& os, const InvarianceCase& c) {
  return os << to_string(c.metric) << " " << to_string(c.dtype);
}
std::string invariance_name(const ::testing::TestParamInfo<InvarianceCase>& i) {
  return to_string(i.param.metric) + "_" + to_string(i.param.dtype);
}

class CpuEngineInvariance : public ::testing::TestWithParam<InvarianceCase> {};

TEST_P(CpuEngineInvariance, BatchSizesOneToSeventyAreBitIdenticalToSingleQueries) {
  // Batch sizes 1..70 cross the 4-query tile and its remainder loop at every offset.
  const auto [m, dt] = GetParam();
  const std::int64_t n = 203, dim = 33, nq = 70;
  const int k = 7;
  const Fixture f = make_fixture(m, dt, Data::kRandom, n, dim, nq, false, 3);
  auto e = engine_for(f, m, dt, n, dim, 2, 70, k);
  const Answer alone = test::run_engine(*e, f.queries, nq, k, 1);
  for (int b = 1; b <= 70; ++b) {
    std::vector<float> first(f.queries.begin(), f.queries.begin() + b * dim);
    const Answer batched = test::run_engine(*e, first, b, k, b);
    Answer expect;
    expect.ids.assign(alone.ids.begin(), alone.ids.begin() + b * k);
    expect.scores.assign(alone.scores.begin(), alone.scores.begin() + b * k);
    test::expect_bit_identical(batched, expect, "batch of " + std::to_string(b));
  }
  // Another composition: the 70 queries in reverse order, in batches of 13.
  std::vector<float> rev(f.queries.size());
  for (std::int64_t q = 0; q < nq; ++q)
    std::copy_n(f.queries.begin() + q * dim, dim, rev.begin() + (nq - 1 - q) * dim);
  const Answer r = test::run_engine(*e, rev, nq, k, 13);
  Answer unrev;
  for (std::int64_t q = nq - 1; q >= 0; --q) {
    unrev.ids.insert(unrev.ids.end(), r.ids.begin() + q * k, r.ids.begin() + (q + 1) * k);
    unrev.scores.insert(unrev.scores.end(), r.scores.begin() + q * k, r.scores.begin() + (q + 1) * k);
  }
  test::expect_bit_identical(unrev, alone, "reversed batches of 13");
  test::expect_within_tolerance(f.oracle_metric, f.oracle_corpus, n, f.ids.data(), f.oracle_queries, nq, dim, k, alone,
                                "batch sweep");
}

TEST_P(CpuEngineInvariance, ThreadCountDoesNotChangeABit) {
  const auto [m, dt] = GetParam();
  const std::int64_t n = 301, dim = 100, nq = 13;
  const int k = 20;
  const Fixture f = make_fixture(m, dt, Data::kRandom, n, dim, nq, false, 4);
  Answer one1, one13;
  for (int threads : {1, 2, 3, 4}) {
    auto e = engine_for(f, m, dt, n, dim, threads, 13, k);
    const Answer a1 = test::run_engine(*e, f.queries, nq, k, 1);
    const Answer a13 = test::run_engine(*e, f.queries, nq, k, 13);
    if (threads == 1) {
      one1 = a1;
      one13 = a13;
      test::expect_bit_identical(a1, a13, "threads 1: batch 1 vs 13");
    } else {
      test::expect_bit_identical(a1, one1, "threads " + std::to_string(threads) + " batch 1");
      test::expect_bit_identical(a13, one13, "threads " + std::to_string(threads) + " batch 13");
    }
  }
}

TEST_P(CpuEngineInvariance, ShardBoundariesDoNotChangeARowsScore) {
  // A row's score is the same whether it sits in a big shard or a shard of its own (invariant 3):
  // split the corpus at odd points, search each part, and compare the merged answer bit for bit.
  const auto [m, dt] = GetParam();
  const std::int64_t n = 97, dim = 19, nq = 6;
  const int k = 9;
  const Fixture f = make_fixture(m, dt, Data::kRandom, n, dim, nq, false, 5);
  auto whole = engine_for(f, m, dt, n, dim, 2, nq, k);
  const Answer expect = test::run_engine(*whole, f.queries, nq, k, static_cast<int>(nq));
  const std::vector<std::int64_t> cuts = {0, 1, 30, 31, 64, 97};
  const int parts = static_cast<int>(cuts.size()) - 1;
  std::vector<Candidate> lists(static_cast<size_t>(parts) * nq * k);
  for (int p = 0; p < parts; ++p) {
    const std::int64_t lo = cuts[p], rows = cuts[p + 1] - lo;
    auto e = make_cpu_engine(ShardInput{f.shard.data() + lo * dim, rows, dim, f.ids.data() + lo}, m, dt,
                             EngineLimits{static_cast<int>(nq), k}, EngineOptions{1});
    const std::vector<Candidate> got = test::EngineRunner(*e).search(f.queries.data(), static_cast<int>(nq), k);
    std::copy(got.begin(), got.end(), lists.begin() + static_cast<std::ptrdiff_t>(p) * nq * k);
  }
  std::vector<Candidate> merged(static_cast<size_t>(nq) * k);
  merge_topk_host(lists.data(), parts, static_cast<int>(nq), k, merged.data());
  Answer got;
  for (const auto& c : merged) {
    got.ids.push_back(c.id);
    got.scores.push_back(reported_score(m, c.score));
  }
  test::expect_bit_identical(got, expect, "5 shards vs 1");
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuEngineInvariance,
                         ::testing::Values(InvarianceCase{Metric::kInnerProduct, Dtype::kFloat32},
                                           InvarianceCase{Metric::kCosine, Dtype::kFloat32},
                                           InvarianceCase{Metric::kL2, Dtype::kFloat32},
                                           InvarianceCase{Metric::kInnerProduct, Dtype::kFloat16},
                                           InvarianceCase{Metric::kL2, Dtype::kBFloat16}),
                         invariance_name);

// ------------------------------------------------------------------------------ ties, padding

TEST(CpuEngineTies, AllEqualRowsReturnTheSmallestGlobalIds) {
  const std::int64_t n = 50, dim = 5;
  const int k = 12;
  std::vector<float> rows(n * dim, 2.0f), q = {1, -1, 3, 0, 2};
  std::vector<std::int64_t> ids = test::iota_ids(n, 7);
  std::mt19937_64 rng(1);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::int64_t> smallest = ids;
  std::sort(smallest.begin(), smallest.end());
  smallest.resize(k);
  for (Metric m : {Metric::kInnerProduct, Metric::kL2, Metric::kCosine})
    for (Dtype dt : {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16})
      for (int threads : {1, 3}) {
        std::vector<float> shard = m == Metric::kCosine ? test::normalized(rows, n, dim) : rows;
        auto e = make_cpu_engine(ShardInput{shard.data(), n, dim, ids.data()}, m, dt, EngineLimits{1, k}, EngineOptions{threads});
        const Answer a = test::run_engine(*e, q, 1, k, 1);
        EXPECT_EQ(a.ids, smallest) << to_string(m) << " " << to_string(dt) << " threads " << threads;
        for (float s : a.scores) EXPECT_EQ(s, a.scores[0]);
      }
}

TEST(CpuEngineTies, PlusAndMinusZeroScoresTieOnTheId) {
  // Rows orthogonal to the query score +0 or -0 (e.g. -1*0 + 0*1); all are equal for ranking.
  const std::vector<float> rows = {0, 1, -0.0f, -1, 0, 5, -0.0f, 2, 0, -3};
  const std::vector<std::int64_t> ids = {9, 3, 7, 1, 5};
  const std::vector<float> q = {1, 0};
  auto e = make_cpu_engine(ShardInput{rows.data(), 5, 2, ids.data()}, Metric::kInnerProduct, Dtype::kFloat32,
                           EngineLimits{1, 5}, EngineOptions{1});
  const Answer a = test::run_engine(*e, q, 1, 5, 1);
  EXPECT_EQ(a.ids, (std::vector<std::int64_t>{1, 3, 5, 7, 9}));
}

TEST(CpuEngineTies, TieAcrossThreadBoundariesGoesToTheSmallerId) {
  // Equal rows at both ends of the shard, so different threads find them.
  const std::int64_t n = 64, dim = 3;
  std::vector<float> rows = test::small_ints(n * dim, 8, -1, 1);
  const std::vector<float> best = {3, 3, 3};
  for (std::int64_t r : {0, 31, 32, 63}) std::copy(best.begin(), best.end(), rows.begin() + r * dim);
  const std::vector<std::int64_t> ids = {};
  std::vector<std::int64_t> gid = test::iota_ids(n);
  std::swap(gid[0], gid[63]);  // the last row carries the smallest id
  for (int threads : {1, 2, 3, 4}) {
    auto e = make_cpu_engine(ShardInput{rows.data(), n, dim, gid.data()}, Metric::kInnerProduct, Dtype::kFloat32, EngineLimits{1, 4}, EngineOptions{threads});
    const Answer a = test::run_engine(*e, best, 1, 4, 1);
    EXPECT_EQ(a.ids, (std::vector<std::int64_t>{0, 31, 32, 63})) << "threads " << threads;
  }
}

TEST(CpuEnginePadding, FewerRowsThanKArePaddedAndAnEmptyShardIsAllPadding) {
  const std::vector<float> rows = {1, 0, 0, 1, 1, 1};
  const std::vector<std::int64_t> ids = {10, 11, 12};
  auto e = make_cpu_engine(ShardInput{rows.data(), 3, 2, ids.data()}, Metric::kL2, Dtype::kFloat32,
                           EngineLimits{2, 8}, EngineOptions{2});
  const std::vector<float> q = {1, 1, 0, 0};
  const std::vector<Candidate> out = test::EngineRunner(*e).search(q.data(), 2, 8);
  for (int b = 0; b < 2; ++b)
    for (int j = 0; j < 8; ++j) {
      const Candidate& c = out[b * 8 + j];
      if (j < 3) {
        EXPECT_NE(c.id, kPadId) << b << "," << j;
      } else {
        EXPECT_EQ(c.id, kPadId) << b << "," << j;
        EXPECT_TRUE(std::isinf(c.score) && c.score < 0);
      }
    }
  EXPECT_EQ(out[0].id, 12);  // distance 0 to {1,1}
  EXPECT_EQ(out[8].id, 10);  // {0,0}: rows 10 and 11 tie at 1: smaller id first
  EXPECT_EQ(out[9].id, 11);

  auto empty = make_cpu_engine(ShardInput{nullptr, 0, 2, nullptr}, Metric::kInnerProduct, Dtype::kFloat16,
                               EngineLimits{2, 4}, EngineOptions{2});
  EXPECT_EQ(empty->info().rows, 0);
  const std::vector<Candidate> none = test::EngineRunner(*empty).search(q.data(), 2, 4);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(none[i].id, kPadId);
}

// ------------------------------------------------------------------------------ engine input errors

TEST(CpuEngineErrors, ValuesThatOverflowTheStorageDtypeNameTheRow) {
  std::vector<float> rows = {1, 2, 3, 4, 70000.0f, 6};
  const std::vector<std::int64_t> ids = {100, 101, 102};
  EXPECT_THAT(test::error_of([&] {
                make_cpu_engine(ShardInput{rows.data(), 3, 2, ids.data()}, Metric::kInnerProduct, Dtype::kFloat16,
                                EngineLimits{1, 1}, EngineOptions{1});
              }),
              AllOf(HasSubstr("corpus row 102"), HasSubstr("float16"), HasSubstr("column 0")));
  // bfloat16 has float32's range: the same rows are accepted.
  EXPECT_NO_THROW(make_cpu_engine(ShardInput{rows.data(), 3, 2, ids.data()}, Metric::kInnerProduct, Dtype::kBFloat16,
                                  EngineLimits{1, 1}, EngineOptions{1}));
}

TEST(CpuEngineErrors, ZeroNormRowsAndQueriesUnderCosine) {
  std::vector<float> rows = {1, 2, 0, 0, 3, 4};
  EXPECT_THAT(test::error_of([&] { normalize_rows(rows.data(), 3, 2, 40, "corpus row"); }),
              AllOf(HasSubstr("corpus row 41"), HasSubstr("zero norm")));
  const std::vector<float> good = {1, 2, 5, 3, 3, 4};
  const std::vector<std::int64_t> ids = {0, 1, 2};
  std::vector<float> shard = test::normalized(good, 3, 2);
  auto e = make_cpu_engine(ShardInput{shard.data(), 3, 2, ids.data()}, Metric::kCosine, Dtype::kFloat32,
                           EngineLimits{3, 2}, EngineOptions{1});
  std::vector<float> q = {1, 1, 0, 0, 2, 2};
  EXPECT_THAT(test::error_of([&] { e->prepare_queries(q.data(), 3, nullptr); }),
              AllOf(HasSubstr("query 1"), HasSubstr("zero norm")));
}

TEST(CpuEngineErrors, PrepareQueriesMatchesNormalizeRowsBitForBit) {
  const std::int64_t dim = 37;
  const auto q = test::random_floats(5 * dim, 12);
  const auto rows = test::random_floats(4 * dim, 13);
  const std::vector<std::int64_t> ids = test::iota_ids(4);
  auto e = make_cpu_engine(ShardInput{rows.data(), 4, dim, ids.data()}, Metric::kCosine, Dtype::kFloat32,
                           EngineLimits{5, 2}, EngineOptions{1});
  std::vector<float> qq = q;
  e->prepare_queries(qq.data(), 5, nullptr);
  const auto expect = test::normalized(q, 5, dim);
  EXPECT_TRUE(std::equal(expect.begin(), expect.end(), qq.begin()));
}

// ------------------------------------------------------------------------------ real vectors

struct BgeCase {
  Metric metric;
  Dtype dtype;
  int k;
};
std::ostream& operator<<(std::ostream& os, const BgeCase& c) {
  return os << to_string(c.metric) << " " << to_string(c.dtype) << " K=" << c.k;
}

class CpuEngineBgeM3 : public ::testing::TestWithParam<BgeCase> {};

TEST_P(CpuEngineBgeM3, ParagraphsAsCorpusSentencesAsQueries) {
  const BgeCase c = GetParam();
  const std::string dir = test::bge_dir();
  const std::int64_t n = 500, nq = 500, dim = 1024;
  const auto corpus = test::read_raw_f32(dir + "/paragraphs-1024.f32", n, dim);
  const auto queries = test::read_raw_f32(dir + "/sentences-1024.f32", nq, dim);
  const std::vector<std::int64_t> ids = test::iota_ids(n);
  std::vector<float> shard = c.metric == Metric::kCosine ? test::normalized(corpus, n, dim) : corpus;
  auto e = make_cpu_engine(ShardInput{shard.data(), n, dim, ids.data()}, c.metric, c.dtype, EngineLimits{64, c.k}, EngineOptions{2});
  const Answer got = test::run_engine(*e, queries, nq, c.k, 64);
  // float32 cosine: the oracle divides by float64 norms of the raw vectors. float16: the oracle
  // on the same rounded values the engine holds.
  const Metric om = c.dtype == Dtype::kFloat32 ? c.metric : Metric::kInnerProduct;
  const std::vector<float> oc = c.dtype == Dtype::kFloat32 ? corpus : test::round_to(c.dtype, shard);
  const std::vector<float> oq =
      (c.dtype != Dtype::kFloat32 && c.metric == Metric::kCosine) ? test::normalized(queries, nq, dim) : queries;
  const auto t = test::expect_within_tolerance(om, oc, n, ids.data(), oq, nq, dim, c.k, got,
                                               "bge-m3 " + to_string(c.metric) + " " + to_string(c.dtype));
  EXPECT_EQ(t.hits, t.slots);
  // Batch independence on real data: the first 9 queries one at a time.
  const std::vector<float> first(queries.begin(), queries.begin() + 9 * dim);
  const Answer alone = test::run_engine(*e, first, 9, c.k, 1);
  test::Answer head;
  head.ids.assign(got.ids.begin(), got.ids.begin() + 9 * c.k);
  head.scores.assign(got.scores.begin(), got.scores.begin() + 9 * c.k);
  test::expect_bit_identical(alone, head, "bge-m3 batch 1 vs 64");
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuEngineBgeM3,
                         ::testing::Values(BgeCase{Metric::kCosine, Dtype::kFloat32, 10},
                                           BgeCase{Metric::kInnerProduct, Dtype::kFloat32, 10},
                                           BgeCase{Metric::kCosine, Dtype::kFloat32, 100},
                                           BgeCase{Metric::kInnerProduct, Dtype::kFloat16, 10},
                                           BgeCase{Metric::kCosine, Dtype::kBFloat16, 10}),
                         [](const ::testing::TestParamInfo<BgeCase>& i) {
                           return to_string(i.param.metric) + "_" + to_string(i.param.dtype) + "_k" +
                                  std::to_string(i.param.k);
                         });


// ------------------------------------------------------------------------------ instruction sets


bool cpu_has_avx2() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}
bool cpu_has_avx512() {
#if defined(__x86_64__)
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

class CpuEngineIsa : public ::testing::TestWithParam<InvarianceCase> {};

TEST_P(CpuEngineIsa, PortableAvx2AndAvx512AreBitIdentical) {
  // Every path computes each (query, row) score with the same arithmetic (DESIGN.md invariant 3),
  // so ids and scores agree bit for bit across paths, batch sizes (tile remainders), D around
  // the 8-lane chunk and the 16-row blocks, odd row counts (the pair layout's padding row), and a
  // K that keeps every row (every score compared) or only a few (the filter and compaction).
  const auto [m, dt] = GetParam();
  const bool avx2 = cpu_has_avx2(), avx512 = cpu_has_avx512();
  std::vector<const char*> isas = {"portable"};
  if (avx2) isas.push_back("avx2");
  if (avx512) isas.push_back("avx512");
  const std::int64_t nq = 64;
  struct Shape {
    std::int64_t dim, rows;
    float scale;  // corpus and queries times this: tiny values reach float16/float32 subnormals
  };
  std::vector<Shape> shapes;
  for (std::int64_t dim : {1, 7, 8, 9, 33, 100, 784})
    for (std::int64_t rows : {1, 2, 3, 17, 64}) shapes.push_back({dim, rows, 1.0f});
  shapes.push_back({33, 300, 1.0f});  // more rows than the selection buffer holds for small K
  if (m != Metric::kCosine) shapes.push_back({33, 17, dt == Dtype::kFloat16 ? 1e-5f : 1e-20f});
  for (const Shape& sh : shapes) {
    Fixture f = make_fixture(m, dt, Data::kRandom, sh.rows, sh.dim, nq, false, 17 + sh.dim * 101 + sh.rows);
    if (sh.scale != 1.0f) {
      for (auto& v : f.shard) v *= sh.scale;
      for (auto& v : f.queries) v *= sh.scale;
    }
    std::vector<int> ks = {static_cast<int>(sh.rows)};
    if (sh.rows > 2) ks.push_back(2);
    if (sh.rows > 100) ks.push_back(1);
    for (int k : ks) {
      Answer ref;
      bool have_ref = false;
      for (const char* isa : isas) {
        EngineOptions opt;
        opt.threads = 2;
        opt.cpu_isa = parse_cpu_isa(isa);
        auto e = make_cpu_engine(ShardInput{f.shard.data(), sh.rows, sh.dim, f.ids.data()}, m, dt,
                                 EngineLimits{static_cast<int>(nq), k}, opt);
        for (int batch : {1, 3, 4, 5, 64}) {
          const Answer a = test::run_engine(*e, f.queries, nq, k, batch);
          if (!have_ref) {
            ref = a;
            have_ref = true;
            continue;
          }
          test::expect_bit_identical(a, ref, std::string(isa) + " batch " + std::to_string(batch) + " vs portable batch 1: D=" +
                                                 std::to_string(sh.dim) + " rows=" + std::to_string(sh.rows) +
                                                 " K=" + std::to_string(k) + " scale=" + std::to_string(sh.scale));
        }
      }
    }
  }
  if (!avx512) GTEST_SKIP() << "this CPU lacks AVX-512 (F/BW/VL): the avx512 leg was skipped" << (avx2 ? "" : ", and avx2");
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuEngineIsa,
                         ::testing::Values(InvarianceCase{Metric::kInnerProduct, Dtype::kFloat32},
                                           InvarianceCase{Metric::kCosine, Dtype::kFloat32},
                                           InvarianceCase{Metric::kL2, Dtype::kFloat32},
                                           InvarianceCase{Metric::kInnerProduct, Dtype::kFloat16},
                                           InvarianceCase{Metric::kCosine, Dtype::kFloat16},
                                           InvarianceCase{Metric::kL2, Dtype::kFloat16},
                                           InvarianceCase{Metric::kInnerProduct, Dtype::kBFloat16},
                                           InvarianceCase{Metric::kCosine, Dtype::kBFloat16},
                                           InvarianceCase{Metric::kL2, Dtype::kBFloat16}),
                         invariance_name);

TEST(CpuEngineIsaTies, RowsTiedWithTheKthScoreEnterOnTheirIdOnEveryPath) {
  // Few distinct rows, many copies, shuffled global ids: candidates tie with the running K-th
  // score all the time, and a later row with a smaller id must still enter. Exact in float32 (and
  // in float16/bfloat16: small integers), so every path must give the oracle's ids, ties included.
  const std::int64_t n = 1500, dim = 3, nq = 9;
  const std::vector<float> rows = test::small_ints(n * dim, 31, -1, 1);
  const std::vector<float> queries = test::small_ints(nq * dim, 32, -1, 1);
  std::vector<std::int64_t> ids = test::iota_ids(n, 5);
  std::mt19937_64 rng(33);
  std::shuffle(ids.begin(), ids.end(), rng);
  const bool avx2 = cpu_has_avx2(), avx512 = cpu_has_avx512();
  for (Metric m : {Metric::kInnerProduct, Metric::kL2})
    for (Dtype dt : {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16})
      for (const char* isa : {"portable", "avx2", "avx512"}) {
        if ((std::string(isa) == "avx2" && !avx2) || (std::string(isa) == "avx512" && !avx512)) continue;
        for (int threads : {1, 2})
          for (int k : {1, 7, 50}) {
            EngineOptions opt;
            opt.threads = threads;
            opt.cpu_isa = parse_cpu_isa(isa);
            auto e = make_cpu_engine(ShardInput{rows.data(), n, dim, ids.data()}, m, dt,
                                     EngineLimits{static_cast<int>(nq), k}, opt);
            for (int batch : {1, 4, 9}) {
              const Answer a = test::run_engine(*e, queries, nq, k, batch);
              test::expect_exact(m, rows, n, ids.data(), queries, nq, dim, k, a,
                                 std::string(isa) + " " + to_string(m) + " " + to_string(dt) + " threads " +
                                     std::to_string(threads) + " K=" + std::to_string(k) + " batch " +
                                     std::to_string(batch));
            }
          }
      }
}

TEST(CpuEngineIsaChoice, UnknownOrUnsupportedValuesAreErrorsNamingThem) {
  const std::vector<float> rows = {1, 2, 3, 4};
  const std::vector<std::int64_t> ids = {0, 1};
  auto build = [&](CpuIsa isa) {
    EngineOptions opt;
    opt.threads = 1;
    opt.cpu_isa = isa;
    make_cpu_engine(ShardInput{rows.data(), 2, 2, ids.data()}, Metric::kInnerProduct, Dtype::kFloat32,
                    EngineLimits{1, 1}, opt);
  };
  EXPECT_THAT(test::error_of([] { parse_cpu_isa("sse9"); }), AllOf(HasSubstr("engine.cpu_isa"), HasSubstr("sse9")));
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    const bool ok = isa == CpuIsa::kAvx2 ? cpu_has_avx2() : cpu_has_avx512();
    if (ok) {
      EXPECT_NO_THROW(build(isa)) << to_string(isa);
    } else {
      EXPECT_THAT(test::error_of([&] { build(isa); }), AllOf(HasSubstr("engine.cpu_isa"), HasSubstr(to_string(isa))));
    }
  }
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAuto}) EXPECT_NO_THROW(build(isa)) << to_string(isa);
}

}  // namespace
}  // namespace shardtopk
