// GPU tests of the CUDA engine through its interface (engine.hpp) and a CUDA memory space
// (engine/space.hpp) for its query and candidate buffers, as the index sets them up; no CUDA
// header: what it is, bad arguments, query preparation, exact ids and ties, random data and real
// vectors against the float64 oracle by DESIGN.md's correctness terms. Against the CPU engine and
// across batches: test_cuda_engine_batched.cpp; the data path: test_cuda_engine_data_path.cpp.
//
// Every test skips, saying so, when no GPU is visible. Under `mpirun -np P` each rank runs the
// whole binary on GPU (local rank mod GPU count); nothing here talks between ranks.
//
// Case tables (why each row exists) are next to the INSTANTIATE_TEST_SUITE_P lines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_engine_rig.hpp"
#include "engine_test_support.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/generator.hpp"
#include "shardtopk/space.hpp"
#include "test_support.hpp"
#include "tools/oracle.hpp"

namespace shardtopk::test {
namespace {

// ------------------------------------------------------------------------------ basic properties

TEST(CudaEngine, DescribesItself) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  EXPECT_TRUE(built_with_cuda());
  const Corpus c = make_corpus(random_floats(100 * 16, 1), 100, 16, Metric::kL2, Dtype::kFloat16,
                               shuffled_ids(100, 2));
  Rig e = make_rig(c.input(), Metric::kL2, Dtype::kFloat16, limits(8, 32));
  const EngineInfo i = e->info();
  EXPECT_EQ(i.name, "cuda");
  EXPECT_EQ(i.space, MemSpace::kDevice);
  EXPECT_EQ(i.metric, Metric::kL2);
  EXPECT_EQ(i.dtype, Dtype::kFloat16);
  EXPECT_EQ(i.rows, 100);
  EXPECT_EQ(i.dim, 16);
  EXPECT_EQ(i.device, test_device());
  EXPECT_FALSE(i.device_name.empty());
  EXPECT_EQ(e->limits().batch_max, 8);
  EXPECT_EQ(e->limits().k_max, 32);
  EXPECT_EQ(e->stream(), e.space->stream()) << "the engine orders its work on the stream it was given";
  // without a stream it makes its own
  EngineOptions opt;
  opt.device = test_device();
  auto own = make_cuda_engine(c.input(), Metric::kL2, Dtype::kFloat16, limits(8, 32), opt);
  EXPECT_NE(own->stream(), nullptr);
  EXPECT_NE(own->stream(), e->stream());
}

TEST(CudaEngine, ResidentBytesArePredicted) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  struct Row {
    std::int64_t n, dim;
    Dtype dt;
    EngineLimits lim;
  };
  // empty shard; one chunk; several chunks (batch_max large forces the smallest chunk); K > tile.
  const Row rows[] = {{0, 8, Dtype::kFloat32, limits(4, 16)},
                      {1000, 100, Dtype::kFloat16, limits(64, 1024)},
                      {20000, 33, Dtype::kBFloat16, limits(1024, 64)},
                      {30000, 3, Dtype::kFloat32, limits(8, 8192)}};
  for (const Row& r : rows) {
    const Corpus c = make_corpus(random_floats(static_cast<size_t>(r.n * r.dim), 3), r.n, r.dim,
                                 Metric::kInnerProduct, r.dt, shuffled_ids(r.n, 4));
    Rig e = make_rig(c.input(), Metric::kInnerProduct, r.dt, r.lim);
    const std::uint64_t predicted = cuda_engine_device_bytes(r.n, r.dim, r.dt, r.lim);
    EXPECT_EQ(e->info().resident_bytes, predicted) << "rows " << r.n << " dim " << r.dim;
    // The shard alone is a lower bound.
    EXPECT_GE(predicted, static_cast<std::uint64_t>(r.n * r.dim) * (r.dt == Dtype::kFloat32 ? 4 : 2));
  }
}

TEST(CudaEngine, ShardThatDoesNotFitSaysHowMuchAndWhatToDo) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  // 5·10^8 rows × 1024 float32 = 2 TB: never fits. The engine must refuse before touching data
  // (the data pointer below holds one row only).
  std::vector<float> one_row(1024, 1.0f);
  std::vector<std::int64_t> one_id(1, 0);
  const ShardInput in{one_row.data(), 500000000LL, 1024, one_id.data()};
  const std::string msg =
      error_of([&] { make_rig(in, Metric::kInnerProduct, Dtype::kFloat32, limits(8, 16)); });
  EXPECT_NE(msg.find("needs"), std::string::npos) << msg;
  EXPECT_NE(msg.find("free"), std::string::npos) << msg;
  EXPECT_NE(msg.find("add ranks"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(cuda_engine_device_bytes(500000000LL, 1024, Dtype::kFloat32, limits(8, 16)))),
            std::string::npos)
      << msg;
}

TEST(CudaEngine, RejectsBadArguments) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  // small integers: the answer after the rejected calls must equal the oracle exactly
  const Corpus c = make_corpus(small_ints(50 * 8, 5), 50, 8, Metric::kInnerProduct, Dtype::kFloat32,
                               shuffled_ids(50, 6));
  // construction
  EngineOptions opt;
  opt.device = test_device();
  EXPECT_NE(error_of([&] {
              make_cuda_engine(ShardInput{c.rows.data(), 50, 0, c.ids.data()}, Metric::kInnerProduct,
                               Dtype::kFloat32, limits(4, 8), opt);
            }).find("dimension"),
            std::string::npos);
  EngineOptions missing;
  missing.device = cuda_device_count() + 3;
  const std::string nodev = error_of([&] {
    make_cuda_engine(c.input(), Metric::kInnerProduct, Dtype::kFloat32, limits(4, 8), missing);
  });
  EXPECT_NE(nodev.find("device " + std::to_string(missing.device) + " does not exist"), std::string::npos) << nodev;
  EXPECT_NE(nodev.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << nodev;
  EXPECT_NE(error_of([&] {
              make_cuda_engine(ShardInput{nullptr, 50, 8, c.ids.data()}, Metric::kInnerProduct, Dtype::kFloat32,
                               limits(4, 8), opt);
            }).find("without data"),
            std::string::npos);
  const std::string kbig = error_of([&] {
    make_cuda_engine(c.input(), Metric::kInnerProduct, Dtype::kFloat32, limits(4, 8193), opt);
  });
  EXPECT_NE(kbig.find("search.k_max=8193"), std::string::npos) << kbig;
  // search / prepare arguments: Error, and the engine keeps working
  Rig e = make_rig(c.input(), Metric::kInnerProduct, Dtype::kFloat32, limits(4, 8));
  const std::string k0 = error_of([&] { search(e, 1, 0); });
  EXPECT_NE(k0.find("k=0"), std::string::npos) << k0;
  const std::string k9 = error_of([&] { search(e, 1, 9); });
  EXPECT_NE(k9.find("k=9"), std::string::npos) << k9;
  const std::string b5 = error_of([&] { search(e, 5, 1); });
  EXPECT_NE(b5.find("batch of 5"), std::string::npos) << b5;
  const std::string neg = error_of([&] { search(e, -1, 1); });
  EXPECT_NE(neg.find("batch of -1"), std::string::npos) << neg;
  SearchArgs null_out;
  null_out.queries = e.queries;
  null_out.batch = 1;
  null_out.k = 1;
  EXPECT_NE(error_of([&] { e->search(null_out); }).find("null"), std::string::npos);
  EXPECT_NE(error_of([&] { e->prepare_queries(e.queries, 5, nullptr); }).find("batch of 5"), std::string::npos);
  EXPECT_NE(error_of([&] { e->load_buffer(1); }).find("streamed"), std::string::npos);
  EXPECT_NE(error_of([&] { e->finish_load(); }).find("streamed"), std::string::npos);
  const std::vector<float> q = small_ints(8, 7);
  const auto got = run_candidates(e, q, 1, 8, 1);
  expect_exact(Metric::kInnerProduct, c.stored, c.n, c.ids.data(), q, 1, 8, 8,
               to_answer(got, Metric::kInnerProduct, 1, 8, 8), "after rejected calls");
}

// ------------------------------------------------------------------------------ prepare_queries

TEST(CudaEngine, CosineQueryNormalisationMatchesNormalizeRowsBitForBit) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const std::int64_t dim = 1000, nq = 16;
  const Corpus c = make_corpus(random_floats(10 * dim, 8), 10, dim, Metric::kCosine, Dtype::kFloat32,
                               shuffled_ids(10, 9));
  Rig e = make_rig(c.input(), Metric::kCosine, Dtype::kFloat32, limits(static_cast<int>(nq), 4));
  std::vector<float> q = random_floats(static_cast<size_t>(nq * dim), 10);
  // magnitudes far from 1, tiny and huge, and a one-hot query
  for (std::int64_t d = 0; d < dim; ++d) {
    q[1 * dim + d] *= 1e-20f;
    q[2 * dim + d] *= 1e20f;
    q[3 * dim + d] = d == 17 ? -3.0f : 0.0f;
  }
  std::vector<float> host = q;
  normalize_rows(host.data(), nq, dim, 0, "query");
  stage(e, q.data(), static_cast<int>(nq));
  std::vector<float> dev(q.size());
  e.space->to_host(dev.data(), e.queries, dev.size() * sizeof(float), true);
  int bad = 0;
  for (size_t i = 0; i < dev.size(); ++i)
    if (bits_of(dev[i]) != bits_of(host[i]) && ++bad <= 5)
      ADD_FAILURE() << "query " << i / dim << " column " << i % dim << ": device " << dev[i] << " host " << host[i];
  EXPECT_EQ(bad, 0);
}

TEST(CudaEngine, PrepareQueriesRejectsNonFiniteAndZeroNormAndStaysUsable) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const std::int64_t dim = 37;
  for (Metric m : {Metric::kInnerProduct, Metric::kCosine, Metric::kL2}) {
    SCOPED_TRACE(mname(m));
    const Corpus c = make_corpus(small_ints(200 * dim, 11, -2, 2), 200, dim, m, Dtype::kFloat32, shuffled_ids(200, 12));
    Rig e = make_rig(c.input(), m, Dtype::kFloat32, limits(4, 10));
    std::vector<float> q = small_ints(4 * dim, 13, 1, 2);  // no zero query
    auto submit = [&](const std::vector<float>& v) {
      return error_of([&] { stage(e, v.data(), 4); });
    };
    std::vector<float> nan = q;
    nan[2 * dim + 5] = std::numeric_limits<float>::quiet_NaN();
    nan[3 * dim + 1] = std::numeric_limits<float>::quiet_NaN();
    const std::string m1 = submit(nan);
    EXPECT_NE(m1.find("query 2"), std::string::npos) << m1;  // the first bad query is named
    EXPECT_NE(m1.find("non-finite"), std::string::npos) << m1;
    EXPECT_NE(m1.find("column 5"), std::string::npos) << m1;
    std::vector<float> inf = q;
    inf[1 * dim + 36] = -std::numeric_limits<float>::infinity();
    const std::string m2 = submit(inf);
    EXPECT_NE(m2.find("query 1"), std::string::npos) << m2;
    EXPECT_NE(m2.find("non-finite"), std::string::npos) << m2;
    std::vector<float> zero = q;
    std::fill(zero.begin() + 3 * dim, zero.begin() + 4 * dim, 0.0f);
    const std::string m3 = submit(zero);
    if (m == Metric::kCosine) {
      EXPECT_NE(m3.find("query 3"), std::string::npos) << m3;
      EXPECT_NE(m3.find("zero norm"), std::string::npos) << m3;
    } else {
      EXPECT_EQ(m3, "<no exception>") << "a zero query is valid for " << mname(m);
    }
    // still serving, with exact answers
    const auto got = run_candidates(e, q, 4, 10, 4);
    const std::vector<float> qp = prepared(q, 4, dim, m);
    if (m == Metric::kCosine) {
      expect_within_tolerance(oracle_metric(m), c.stored, c.n, c.ids.data(), qp, 4, dim, 10,
                              to_answer(got, m, 4, 10, 10), "after rejected batches");
    } else {
      expect_exact(m, c.stored, c.n, c.ids.data(), qp, 4, dim, 10, to_answer(got, m, 4, 10, 10),
                   "after rejected batches");
    }
  }
}

// ------------------------------------------------------------------------------ exact ids, ties

std::vector<SearchCase> exact_cases() {
  return search_cases(
      {
          // n, dim, batch, k, k_max, batch_max         why
          {1, 7, 3, 1, 16, 8},              // N=1, K=1
          {37, 3, 5, 37, 64, 8},            // K=N
          {5, 33, 2, 10, 16, 8},            // rows < K: the rest is padding
          {100, 5, 2, 1024, 1024, 8},       // K=1024 > rows
          {3000, 1, 4, 1024, 1024, 8},      // D=1: five distinct scores, ties everywhere; K=1024, 2 tiles
          {5000, 7, 3, 100, 1024, 8},       // D=7 (not a multiple of 4/8), 3 tiles
          {2500, 100, 8, 1, 1024, 8},       // D=100 (partial last step), K=1
          {4100, 784, 2, 50, 1024, 8},      // D=784 (MNIST)
          {9000, 16, 64, 10, 1024, 64},     // batch 64 (8-query score blocks), 5 tiles -> 2-level tree
          {20000, 33, 3, 3000, 4096, 8},    // K=3000: 8192-row tiles
          {30000, 3, 2, 8000, 8192, 8},     // K = 8000 (k_max at the engine's limit), 25 distinct scores
          {0, 5, 3, 7, 16, 8},              // empty shard: all padding
          {20000, 33, 3, 50, 64, 1024},     // batch_max 1024 forces 8192-row chunks: 3 chunks
          {20000, 7, 2, 3000, 4096, 1024},  // 3 chunks, one tile each, K=3000
          {40000, 5, 2, 8000, 8192, 1024},  // large K through the batched path with batch_max 1024
          {3000, 1, 1, 1024, 1024, 8},      // batch 1: D=1, every score tied with a thousand others
      },
      {Metric::kInnerProduct, Metric::kL2});
}

class ExactTies : public ::testing::TestWithParam<SearchCase> {};

// Small integers in [-2, 2]: every score is exact in float32 (and every value exact in float16
// and bfloat16), so ids must equal the oracle's exactly, ties (broken on shuffled global ids)
// included, and every score must equal the float64 score.
TEST_P(ExactTies, IdsAndScoresEqualTheOracle) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const SearchCase& p = GetParam();
  const Corpus c = make_corpus(small_ints(static_cast<size_t>(p.n * p.dim), 100 + p.n + p.dim, -2, 2), p.n, p.dim,
                               p.metric, p.dtype, shuffled_ids(p.n, 200 + p.n));
  Rig e = make_rig(c.input(), p.metric, p.dtype, limits(p.batch_max, p.k_max));
  const std::vector<float> q = small_ints(static_cast<size_t>(p.batch * p.dim), 300 + p.dim, -2, 2);
  const auto got = run_candidates(e, q, p.batch, p.k, p.batch);
  const int kk = static_cast<int>(std::min<std::int64_t>(p.k, p.n));
  if (kk > 0)
    expect_exact(p.metric, c.stored, c.n, c.ids.data(), q, p.batch, p.dim, kk,
                 to_answer(got, p.metric, p.batch, p.k, kk), p.name());
  expect_padding(got, p.batch, p.k, kk, p.name());
}

INSTANTIATE_TEST_SUITE_P(Gpu, ExactTies, ::testing::ValuesIn(exact_cases()), case_name);

// ------------------------------------------------------------------------------ random data

std::vector<SearchCase> random_cases() {
  return search_cases(
      {
          // n, dim, batch, k, k_max, batch_max    why
          {3000, 100, 8, 10, 1024, 16},    // typical small k
          {5000, 784, 4, 100, 1024, 16},   // MNIST-like width
          {2000, 33, 16, 1024, 1024, 16},  // K=1024, unaligned D
          {1500, 4099, 2, 20, 1024, 16},   // D far beyond one shared-memory step, odd
      },
      {Metric::kInnerProduct, Metric::kCosine, Metric::kL2});
}

class RandomData : public ::testing::TestWithParam<SearchCase> {};

// Uniform floats in [-1, 1): within DESIGN.md's ε of the float64 oracle computed on the values
// the engine stores (rounded to float16/bfloat16 by an independent rounding); near-tie swaps
// are counted and printed.
TEST_P(RandomData, WithinToleranceOfTheOracle) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const SearchCase& p = GetParam();
  const Corpus c = make_corpus(random_floats(static_cast<size_t>(p.n * p.dim), 400 + p.n), p.n, p.dim, p.metric,
                               p.dtype, shuffled_ids(p.n, 500 + p.n));
  Rig e = make_rig(c.input(), p.metric, p.dtype, limits(p.batch_max, p.k_max));
  const std::vector<float> q = random_floats(static_cast<size_t>(p.batch * p.dim), 600 + p.dim);
  const auto got = run_candidates(e, q, p.batch, p.k, p.batch_max);
  expect_within_tolerance(oracle_metric(p.metric), c.stored, c.n, c.ids.data(), prepared(q, p.batch, p.dim, p.metric),
                          p.batch, p.dim, p.k, to_answer(got, p.metric, p.batch, p.k, p.k), p.name());
}

INSTANTIATE_TEST_SUITE_P(Gpu, RandomData, ::testing::ValuesIn(random_cases()), case_name);

// ------------------------------------------------------------------------------ real vectors

class BgeM3 : public ::testing::TestWithParam<DtypeMetric> {};

// 500 bge-m3 paragraph embeddings as the corpus, 500 sentence embeddings as queries (about 40
// near-identical pairs: real near-ties). Within ε of the oracle, k = 10 and 100, in batches of
// 64 (tensor-core path) and bit-identical to batch 1.
TEST_P(BgeM3, WithinToleranceOfTheOracle) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const DtypeMetric& p = GetParam();
  const std::int64_t n = 500, nq = 500, dim = 1024;
  const std::vector<float> corpus = read_raw_f32(bge_dir() + "/paragraphs-1024.f32", n, dim);
  const std::vector<float> queries = read_raw_f32(bge_dir() + "/sentences-1024.f32", nq, dim);
  std::vector<std::int64_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  const Corpus c = make_corpus(corpus, n, dim, p.metric, p.dtype, ids);
  Rig e = make_rig(c.input(), p.metric, p.dtype, limits(64, 128));
  for (int k : {10, 100}) {
    const auto got = run_candidates(e, queries, nq, k, 64);
    expect_within_tolerance(oracle_metric(p.metric), c.stored, n, c.ids.data(), prepared(queries, nq, dim, p.metric),
                            nq, dim, k, to_answer(got, p.metric, nq, k, k),
                            "bge-m3 " + p.name() + " k=" + std::to_string(k));
    expect_same_candidates(got, run_candidates(e, queries, nq, k, 1), "bge-m3 batch 64 vs 1 " + p.name());
  }
}

std::vector<DtypeMetric> bge_cases() {
  std::vector<DtypeMetric> out;
  for (Dtype dt : {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16})
    for (Metric m : {Metric::kCosine, Metric::kInnerProduct}) out.push_back({dt, m});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Gpu, BgeM3, ::testing::ValuesIn(bge_cases()),
                         [](const ::testing::TestParamInfo<DtypeMetric>& i) { return i.param.name(); });

}  // namespace
}  // namespace shardtopk::test
