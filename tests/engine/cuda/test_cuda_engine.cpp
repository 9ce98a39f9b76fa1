// GPU tests of the CUDA engine through its interface (engine.hpp) and a CUDA memory space
// (engine/space.hpp) for its query and candidate buffers, as the index sets them up; no CUDA
// header. Every result is compared with the float64 oracle by DESIGN.md's correctness terms,
// with the CPU engine, or with itself under another batch, option or stream (bit-exact).
//
// Every test skips, saying so, when no GPU is visible. Under `mpirun -np P` each rank runs the
// whole binary on GPU (local rank mod GPU count); nothing here talks between ranks.
//
// Case tables (why each row exists) are next to the INSTANTIATE_TEST_SUITE_P lines.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "shardtopk/space.hpp"
#include "engine_test_support.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/generator.hpp"
#include "tools/oracle.hpp"
#include "shardtopk/ordering.hpp"
#include "shardtopk/types.hpp"
#include "test_support.hpp"

namespace shardtopk::test {
namespace {

// ------------------------------------------------------------------------------ helpers

/// A corpus as the index hands it to an engine (cosine rows already normalised) plus what the
/// oracle must see to judge the engine's arithmetic: the stored values (rounded to the storage
/// dtype) and, for cosine, inner product of normalised vectors (the oracle's own cosine would
/// re-normalise rounded rows and differ by the rounding, which is not the engine's error).
struct Corpus {
  std::int64_t n = 0, dim = 0;
  std::vector<float> rows;      // handed to the engine (float32)
  std::vector<float> stored;    // what the engine scores: rows rounded to the dtype
  std::vector<std::int64_t> ids;
  ShardInput input() const { return ShardInput{rows.data(), n, dim, ids.data()}; }
};

Corpus make_corpus(std::vector<float> raw, std::int64_t n, std::int64_t dim, Metric m, Dtype dt,
                   std::vector<std::int64_t> ids) {
  Corpus c;
  c.n = n;
  c.dim = dim;
  c.rows = std::move(raw);
  if (m == Metric::kCosine && n > 0) normalize_rows(c.rows.data(), n, dim, 0, "test row");
  c.stored = rounded(dt, c.rows);
  c.ids = std::move(ids);
  return c;
}

/// Queries as the engine sees them after prepare_queries (cosine: normalised on the host with
/// the same arithmetic).
std::vector<float> prepared(std::vector<float> q, std::int64_t nq, std::int64_t dim, Metric m) {
  if (m == Metric::kCosine) normalize_rows(q.data(), nq, dim, 0, "query");
  return q;
}

EngineLimits limits(int batch_max, int k_max) {
  EngineLimits l;
  l.batch_max = batch_max;
  l.k_max = k_max;
  return l;
}

/// The engine on the test's GPU, ordered on the stream of a CUDA space that holds a query
/// buffer [batch_max, dim] and a candidate buffer [batch_max, k_max] (as the index sets it up).
struct Rig {
  std::unique_ptr<Space> space;
  std::unique_ptr<Engine> engine;
  float* queries = nullptr;
  Candidate* out = nullptr;
  Engine* operator->() const { return engine.get(); }
};

Rig make_rig(const ShardInput& in, Metric m, Dtype dt, const EngineLimits& lim, EngineOptions opt = {}) {
  Rig r;
  r.space = make_cuda_space(test_device());
  opt.device = test_device();
  r.engine = make_cuda_engine(in, m, dt, lim, opt, r.space->stream());
  r.queries = static_cast<float*>(r.space->alloc(sizeof(float) * lim.batch_max * in.dim));
  r.out = static_cast<Candidate*>(r.space->alloc(sizeof(Candidate) * lim.batch_max * lim.k_max));
  return r;
}

/// One search of the first b queries in r.queries into r.out, with optional epilogue and stream.
void search(Rig& r, int b, int k, SearchEpilogue* epilogue = nullptr, void* stream = nullptr) {
  SearchArgs a;
  a.queries = r.queries;
  a.batch = b;
  a.k = k;
  a.out = r.out;
  a.stream = stream;
  a.epilogue = epilogue;
  r->search(a);
}

/// Copies host queries [b, dim] into r.queries and prepares them (validation; cosine: normalised).
void stage(Rig& r, const float* host, int b) {
  r.space->from_host(r.queries, host, sizeof(float) * b * r->info().dim, false);
  r->prepare_queries(r.queries, b, nullptr);
}

/// An epilogue as the one-rank index uses it: the space splits the search's answer into ids
/// and reported scores in mapped pinned memory, inside the search's CUDA graph.
class SplitEpilogue final : public SearchEpilogue {
 public:
  SplitEpilogue(Space& space, Metric m, int batch_max, int k_max) : space_(space), l2_(m == Metric::kL2) {
    const std::size_t n = static_cast<std::size_t>(batch_max) * k_max;
    ids_ = static_cast<std::int64_t*>(space.alloc_host(n * sizeof(std::int64_t)));
    scores_ = static_cast<float*>(space.alloc_host(n * sizeof(float)));
    dev_ids_ = static_cast<std::int64_t*>(space.mapped(ids_));
    dev_scores_ = static_cast<float*>(space.mapped(scores_));
  }
  void enqueue(const Candidate* list, int batch, int k, void* stream) override {
    space_.split(list, static_cast<std::int64_t>(batch) * k, l2_, dev_ids_, dev_scores_, stream);
  }
  /// The answer [batch, k] of the last split (once the stream has passed it).
  Answer read(int batch, int k) const {
    const std::size_t n = static_cast<std::size_t>(batch) * k;
    Answer a;
    a.ids.assign(ids_, ids_ + n);
    a.scores.assign(scores_, scores_ + n);
    return a;
  }

 private:
  Space& space_;
  bool l2_;
  std::int64_t *ids_ = nullptr, *dev_ids_ = nullptr;
  float *scores_ = nullptr, *dev_scores_ = nullptr;
};

/// Runs nq host queries through the engine in batches of `batch`: copy in, prepare, search,
/// copy the [b, k] candidates out. Returns the raw candidates [nq, k].
std::vector<Candidate> run_candidates(Rig& r, const std::vector<float>& queries, std::int64_t nq, int k, int batch) {
  const std::int64_t dim = r->info().dim;
  std::vector<Candidate> out(static_cast<size_t>(nq * k));
  for (std::int64_t q0 = 0; q0 < nq; q0 += batch) {
    const int b = static_cast<int>(std::min<std::int64_t>(batch, nq - q0));
    stage(r, queries.data() + q0 * dim, b);
    search(r, b, k);
    r.space->to_host(out.data() + q0 * k, r.out, sizeof(Candidate) * b * k, true);
  }
  return out;
}

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

// ------------------------------------------------------------------------------ GPU vs CPU, batch

struct DtypeMetric {
  Dtype dtype;
  Metric metric;
  std::string name() const { return std::string(dname(dtype)) + "_" + mname(metric); }
};

std::ostream& operator<<(std::ostream& os, const DtypeMetric& c) { return os << c.name(); }

std::vector<DtypeMetric> dtype_metrics() {
  std::vector<DtypeMetric> out;
  for (Dtype dt : {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16})
    for (Metric m : {Metric::kInnerProduct, Metric::kCosine, Metric::kL2}) out.push_back({dt, m});
  return out;
}

class CudaVsCpu : public ::testing::TestWithParam<DtypeMetric> {};

// Between backends bit identity is not required (DESIGN.md invariant 3): the CUDA engine has its
// own fixed order (score.cuh). Ids must agree except near-ties, and scores within ε.
TEST_P(CudaVsCpu, SameAnswers) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const DtypeMetric& p = GetParam();
  for (std::int64_t dim : {100LL, 37LL}) {
    const std::int64_t n = 6000, nq = 16;
    const int k = 100;
    const std::string what = p.name() + "_d" + std::to_string(dim);
    const Corpus c = make_corpus(random_floats(static_cast<size_t>(n * dim), 700 + dim), n, dim, p.metric, p.dtype,
                                 shuffled_ids(n, 701));
    Rig gpu = make_rig(c.input(), p.metric, p.dtype, limits(16, 128));
    EngineOptions cpu_opt;
    cpu_opt.threads = 2;
    auto cpu = make_cpu_engine(c.input(), p.metric, p.dtype, limits(16, 128), cpu_opt);
    const std::vector<float> q = random_floats(static_cast<size_t>(nq * dim), 702);
    const Answer g = to_answer(run_candidates(gpu, q, nq, k, 16), p.metric, nq, k, k);
    const Answer h = run_engine(*cpu, q, nq, k, 16);
    // ids equal except near-ties within ε
    int differing = 0;
    for (std::int64_t qi = 0; qi < nq; ++qi) {
      const double eps = oracle::epsilon(h.scores[qi * k], h.scores[qi * k + k - 1]);
      for (int j = 0; j < k; ++j) {
        const std::int64_t i = qi * k + j;
        if (g.ids[i] == h.ids[i]) continue;
        ++differing;
        EXPECT_LE(std::fabs(static_cast<double>(g.scores[i]) - h.scores[i]), eps)
            << what << ": query " << qi << " rank " << j << " ids differ beyond a near-tie";
      }
    }
    std::printf("  [%s] GPU vs CPU: %d of %lld ids differ (near-ties)\n", what.c_str(), differing,
                static_cast<long long>(nq * k));
    for (std::int64_t i = 0; i < nq * k; ++i) {
      const double eps = oracle::epsilon(h.scores[(i / k) * k], h.scores[(i / k) * k + k - 1]);
      EXPECT_LE(std::fabs(static_cast<double>(g.scores[i]) - h.scores[i]), eps) << what << ": slot " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Gpu, CudaVsCpu, ::testing::ValuesIn(dtype_metrics()),
                         [](const ::testing::TestParamInfo<DtypeMetric>& i) { return i.param.name(); });

class BatchIndependence : public ::testing::TestWithParam<DtypeMetric> {};

// A query's ids and score bits do not depend on the batch it came in (DESIGN.md invariant 3):
// alone (the batch-1 scan), and in batches of 2, 7, 64 and 256 (the tensor-core path: several
// chunks of rows at 64 and 256), at every position of a batch of 7. 70,000 rows so that the
// batched path runs over several chunks.
TEST_P(BatchIndependence, SameBitsAloneAndInBatches) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const DtypeMetric& p = GetParam();
  const std::int64_t n = 70000, dim = 100, nq = 256;
  const int k = 50;
  const Corpus c = make_corpus(random_floats(static_cast<size_t>(n * dim), 800), n, dim, p.metric, p.dtype,
                               shuffled_ids(n, 801));
  Rig e = make_rig(c.input(), p.metric, p.dtype, limits(256, 64));
  const std::vector<float> q = random_floats(static_cast<size_t>(nq * dim), 802);
  const auto single = run_candidates(e, q, nq, k, 1);
  for (int b : {2, 7, 64, 256})
    expect_same_candidates(run_candidates(e, q, nq, k, b), single,
                           p.name() + ": batch " + std::to_string(b) + " vs alone");
  // one query at every position of a batch of 7 whose other queries change
  const std::int64_t probe = 5;
  for (int pos = 0; pos < 7; ++pos) {
    std::vector<float> batch = random_floats(static_cast<size_t>(7 * dim), 900 + pos);
    std::copy(q.begin() + probe * dim, q.begin() + (probe + 1) * dim, batch.begin() + pos * dim);
    const auto got = run_candidates(e, batch, 7, k, 7);
    const std::vector<Candidate> mine(got.begin() + pos * k, got.begin() + (pos + 1) * k);
    const std::vector<Candidate> want(single.begin() + probe * k, single.begin() + (probe + 1) * k);
    expect_same_candidates(mine, want, p.name() + ": position " + std::to_string(pos) + " of 7");
  }
  expect_within_tolerance(oracle_metric(p.metric), c.stored, c.n, c.ids.data(), prepared(q, 8, dim, p.metric), 8, dim,
                          k, to_answer(std::vector<Candidate>(single.begin(), single.begin() + 8 * k), p.metric, 8, k, k),
                          p.name() + " vs oracle");
}

INSTANTIATE_TEST_SUITE_P(Gpu, BatchIndependence, ::testing::ValuesIn(dtype_metrics()),
                         [](const ::testing::TestParamInfo<DtypeMetric>& i) { return i.param.name(); });

class FilterBound : public ::testing::TestWithParam<DtypeMetric> {};

/// Rows [n, dim] = ±(base + eps · noise) (base, noise uniform in [-1, 1] from seeds seed and
/// seed + 1; every 3rd row negated), every `every`-th row scaled by `scale`; *base_out = base.
std::vector<float> near_tie_rows(std::int64_t n, std::int64_t dim, std::uint64_t seed, float eps, int every,
                                 float scale, std::vector<float>* base_out) {
  *base_out = random_floats(static_cast<size_t>(dim), seed);
  const std::vector<float>& base = *base_out;
  const std::vector<float> noise = random_floats(static_cast<size_t>(n * dim), seed + 1);
  std::vector<float> raw(static_cast<size_t>(n * dim));
  for (std::int64_t r = 0; r < n; ++r) {
    const float sign = (r % 3 == 0) ? -1.0f : 1.0f;
    const float s = (r % every == 0) ? scale : 1.0f;
    for (std::int64_t d = 0; d < dim; ++d) raw[r * dim + d] = s * sign * (base[d] + eps * noise[r * dim + d]);
  }
  return raw;
}

/// Queries [nq, dim] = ±(base + 1e-2 · noise) (noise uniform in [-1, 1] from `seed`; odd queries
/// negated): every query near the rows of near_tie_rows, so their scores crowd the k-th.
std::vector<float> near_base_queries(const std::vector<float>& base, std::int64_t nq, std::int64_t dim,
                                     std::uint64_t seed) {
  std::vector<float> q(static_cast<size_t>(nq * dim));
  const std::vector<float> qn = random_floats(static_cast<size_t>(nq * dim), seed);
  for (std::int64_t i = 0; i < nq; ++i)
    for (std::int64_t d = 0; d < dim; ++d) q[i * dim + d] = (i % 2 ? -1.0f : 1.0f) * (base[d] + 1e-2f * qn[i * dim + d]);
  return q;
}

/// Queries [nq, dim] searched one by one and in each of `batches`: the same bits, and the
/// float64 oracle's answer within ε.
void expect_batches_match_alone_and_oracle(Rig& e, const Corpus& c, Metric m, const std::vector<float>& q,
                                           std::int64_t nq, int k, std::initializer_list<int> batches,
                                           const std::string& what) {
  const auto single = run_candidates(e, q, nq, k, 1);
  for (const int b : batches)
    expect_same_candidates(run_candidates(e, q, nq, k, b), single, what + ": batch " + std::to_string(b) + " vs batch 1");
  expect_within_tolerance(oracle_metric(m), c.stored, c.n, c.ids.data(), prepared(q, nq, c.dim, m), nq, c.dim, k,
                          to_answer(single, m, nq, k, k), what + " vs oracle");
}

// Adversarial inputs for the batched path's filter (docs/EXACTNESS.md): rows that are one base
// vector plus tiny perturbations, so hundreds of scores crowd the k-th within the filter's
// margin; large norms (×1000) and mixed signs. The batched answer must equal the batch-1 scan's
// bit for bit and be within ε of the float64 oracle.
TEST_P(FilterBound, NearTiesLargeNormsMixedSigns) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const DtypeMetric& p = GetParam();
  const std::int64_t n = 20000, dim = 96, nq = 8;
  const int k = 100;
  std::vector<float> base;
  const std::vector<float> raw = near_tie_rows(n, dim, 1300, 1e-3f, 7, 1000.0f, &base);
  const Corpus c = make_corpus(raw, n, dim, p.metric, p.dtype, shuffled_ids(n, 1302));
  Rig e = make_rig(c.input(), p.metric, p.dtype, limits(8, 128));
  const std::vector<float> q = near_base_queries(base, nq, dim, 1303);
  expect_batches_match_alone_and_oracle(e, c, p.metric, q, nq, k, {8}, p.name());
}

// The batched GEMM of float16 shards writes __half (largest finite value 65,504). The engine
// scales each query so that no output can overflow (an inf would flood the candidate pool and
// push the query onto the batch-1 fallback) and charges the output's rounding to Δ. Rows with
// elements near half's range and queries from 1e-30 to 1e30 (‖q‖ · max‖x‖ up to ~1e35, near the
// admission bound FLT_MAX / 2; l2 up to 1e15 so that (‖q‖ + max‖x‖)² stays admissible) must give
// the batch-1 bits and the oracle's answer for every storage type and metric, and no fallback for
// inner product (without the scale cap, float16's outputs overflow and all of them fall back).
TEST_P(FilterBound, ExtremeNormsNeitherOverflowNorFallBack) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const DtypeMetric& p = GetParam();
  const std::int64_t n = 20000, dim = 96, nq = 6;
  const int k = 50;
  std::vector<float> base;
  const std::vector<float> raw = near_tie_rows(n, dim, 1310, 1e-2f, 5, 2.0e4f, &base);  // elements up to ~2e4
  const Corpus c = make_corpus(raw, n, dim, p.metric, p.dtype, shuffled_ids(n, 1312));
  Rig e = make_rig(c.input(), p.metric, p.dtype, limits(8, 128));
  const float big = p.metric == Metric::kL2 ? 1e15f : 1e30f;
  const float qscale[nq] = {big, -big, 1.0f, -1.0f, 1e-30f, -1e-30f};
  std::vector<float> q(static_cast<size_t>(nq * dim));
  const std::vector<float> qn = random_floats(static_cast<size_t>(nq * dim), 1313);
  for (std::int64_t i = 0; i < nq; ++i)
    for (std::int64_t d = 0; d < dim; ++d) q[i * dim + d] = qscale[i] * (base[d] + 1e-1f * qn[i * dim + d]);
  e->reset_transfer_counters();
  expect_batches_match_alone_and_oracle(e, c, p.metric, q, nq, k, {static_cast<int>(nq)}, p.name());
  // Inner product only: cosine normalises both sides (no extreme norms remain, and its rows all
  // point one way, so they flood the pool), and for l2 a query norm of 1e15 puts every distance
  // within Δ of the k-th (u · ‖q‖² ≫ the spread 2 ‖q‖ · ‖x‖): the fallback is the right answer.
  if (p.metric == Metric::kInnerProduct) {
    EXPECT_EQ(e->transfer_counters().batched_fallbacks, 0u)
        << p.name() << ": a query left the batched path (an output overflowed or the pool flooded)";
  }
}

// Chunk shapes the sizes above never make: a shard of 37 rows (the first chunk only), 8,192 + 37
// rows (a 37-row second chunk: cuBLAS splits such a GEMM over d and, with float16 output, rounds
// each partial sum to float16, which Δ charges; and the filter's scalar path, 37 not being a
// multiple of its 8-value loads) and 20,003 rows (an 11,811-row last chunk), at D = 768 with near-tied
// rows, batches of 64 and 8: batched equals batch 1 bit for bit and the float64 oracle.
TEST_P(FilterBound, OddChunkShapesSmallShardsAndTails) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const DtypeMetric& p = GetParam();
  const std::int64_t dim = 768, nq = 64;
  const int k = 10;
  for (const std::int64_t n : {std::int64_t{37}, std::int64_t{8192 + 37}, std::int64_t{20003}}) {
    std::vector<float> base;
    const std::vector<float> raw = near_tie_rows(n, dim, 1320, 1e-3f, 7, 1000.0f, &base);
    const Corpus c = make_corpus(raw, n, dim, p.metric, p.dtype, shuffled_ids(n, 1322));
    Rig e = make_rig(c.input(), p.metric, p.dtype, limits(64, 16));
    const std::vector<float> q = near_base_queries(base, nq, dim, 1323);
    expect_batches_match_alone_and_oracle(e, c, p.metric, q, nq, k, {64, 8}, p.name() + " n=" + std::to_string(n));
  }
}

INSTANTIATE_TEST_SUITE_P(Gpu, FilterBound, ::testing::ValuesIn(dtype_metrics()),
                         [](const ::testing::TestParamInfo<DtypeMetric>& i) { return i.param.name(); });

// More rows tie at the k-th score than the final sort holds (the batch-1 slow path, and the
// batched path's fallback to it): every row equal, so the answer is the k smallest ids.
TEST(CudaEngine, MassiveTiesTakeTheSmallestIds) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const std::int64_t n = 50000, dim = 8;
  const int k = 100;
  std::vector<float> raw(static_cast<size_t>(n * dim), 0.5f);
  for (std::int64_t r = 0; r < 40; ++r) raw[(r * 997) * dim] = 2.0f;  // 40 rows above the tie
  const Corpus c = make_corpus(raw, n, dim, Metric::kInnerProduct, Dtype::kFloat32, shuffled_ids(n, 1400));
  Rig e = make_rig(c.input(), Metric::kInnerProduct, Dtype::kFloat32, limits(4, 128));
  const std::vector<float> q(static_cast<size_t>(4 * dim), 1.0f);
  for (int b : {1, 4}) {
    const auto got = run_candidates(e, q, 4, k, b);
    expect_exact(Metric::kInnerProduct, c.stored, c.n, c.ids.data(), q, 4, dim, k,
                 to_answer(got, Metric::kInnerProduct, 4, k, k), "massive ties, batch " + std::to_string(b));
  }
  // A search with an epilogue (the one-rank index's export) queues it inside the batched path's
  // graph, before the overflow check; here every pool overflows, so the epilogue must be queued
  // again after the fallback: the exported ids and scores equal the listed candidates, not the
  // overflowed pools'. Twice: on the graph's capture and on its replay.
  const std::uint64_t fallbacks = e->transfer_counters().batched_fallbacks;
  EXPECT_GT(fallbacks, 0u) << "the tied rows were meant to overflow the batched pools";
  const std::vector<Candidate> listed = run_candidates(e, q, 4, k, 4);
  const Answer want = to_answer(listed, Metric::kInnerProduct, 4, k, k);
  SplitEpilogue ep(*e.space, Metric::kInnerProduct, 4, k);
  for (int rep = 0; rep < 2; ++rep) {
    stage(e, q.data(), 4);
    search(e, 4, k, &ep);
    e.space->synchronize();
    const Answer got = ep.read(4, k);
    EXPECT_EQ(got.ids, want.ids) << "call " << rep;
    EXPECT_EQ(got.scores, want.scores) << "call " << rep;
  }
  EXPECT_GE(e->transfer_counters().batched_fallbacks, fallbacks + 12) << "the searches with an epilogue fell back";
}

// The batch-1 scan's options reach it through EngineOptions and change no bit: the schedule
// (a persistent grid striding over the shard; blocks of 1,024 contiguous rows), the direction
// (forward with plain loads; alternating between searches with L2 hints: with three queries run
// twice, each query is searched once in each direction) and the rows per warp (the width's
// shape; 2 rows of 32 lanes at every width): the same candidates bit for bit, and the float64
// oracle's answer. D = 100 (a partial last chunk; 300,001 rows: a partial last block and an
// unpaired last row) and 768; every storage type, both metrics. (test_scan_select covers every
// shape at the launcher.)
TEST(CudaEngine, ScanOptionsChangeNoBits) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const int nq = 3, k = 100;
  for (const auto& [n, dim] : {std::pair<std::int64_t, std::int64_t>{300001, 100}, {20003, 768}}) {
    const std::vector<float> raw = random_floats(static_cast<size_t>(n * dim), 1600);
    const std::vector<float> q = random_floats(static_cast<size_t>(nq * dim), 1601);
    for (const Dtype t : {Dtype::kFloat16, Dtype::kFloat32, Dtype::kBFloat16})
      for (const Metric m : {Metric::kInnerProduct, Metric::kL2}) {
        const Corpus c = make_corpus(raw, n, dim, m, t, shuffled_ids(n, 1602));
        const std::string what = std::string(mname(m)) + " " + dname(t) + " D=" + std::to_string(dim);
        std::vector<Candidate> ref;
        for (int variant = 0; variant < 6; ++variant) {
          const bool blocked = variant & 1, alternate = variant & 2, two_rows = variant & 4;
          EngineOptions opt;
          opt.scan_schedule = blocked ? ScanSchedule::kBlocked : ScanSchedule::kPersistent;
          opt.scan_rows = two_rows ? ScanRows::kTwo : ScanRows::kAuto;
          opt.scan_l2_hints = alternate;
          Rig e = make_rig(c.input(), m, t, limits(4, 128), opt);
          const std::string v = what + (blocked ? " blocked" : " persistent") + (alternate ? " alternating" : " forward") +
                                (two_rows ? " 2 rows per warp" : "");
          for (int run = 0; run < (alternate ? 2 : 1); ++run) {
            const std::vector<Candidate> got = run_candidates(e, q, nq, k, 1);
            if (ref.empty()) {
              ref = got;
              expect_within_tolerance(oracle_metric(m), c.stored, c.n, c.ids.data(), prepared(q, nq, dim, m), nq,
                                      dim, k, to_answer(got, m, nq, k, k), v + " vs oracle");
            } else {
              expect_same_candidates(got, ref, v + " run " + std::to_string(run) + " vs persistent forward");
            }
          }
        }
      }
  }
}

// A generated shard (made on the device) equals the same rows generated on the host.
TEST(CudaEngine, GeneratedShardEqualsHostRows) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const std::int64_t n = 5000, dim = 77, first = 123456;
  for (Metric m : {Metric::kInnerProduct, Metric::kCosine}) {
    std::vector<float> raw(static_cast<size_t>(n * dim));
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t d = 0; d < dim; ++d) raw[r * dim + d] = generated_value(42, first + r, d);
    std::vector<std::int64_t> ids(static_cast<size_t>(n));
    std::iota(ids.begin(), ids.end(), first);
    const Corpus c = make_corpus(raw, n, dim, m, Dtype::kFloat16, ids);
    ShardInput gen;
    gen.rows = n;
    gen.dim = dim;
    gen.generated = true;
    gen.seed = 42;
    gen.first_row = first;
    Rig a = make_rig(c.input(), m, Dtype::kFloat16, limits(4, 32));
    Rig b = make_rig(gen, m, Dtype::kFloat16, limits(4, 32));
    const std::vector<float> q = random_floats(static_cast<size_t>(4 * dim), 1500);
    expect_same_candidates(run_candidates(a, q, 4, 32, 4), run_candidates(b, q, 4, 32, 4),
                           std::string("generated vs host rows ") + mname(m));
  }
}

// ------------------------------------------------------------------------------ data path

// The engine moves nothing between the host and the device by itself (the data path's copies
// are the space's): its counters stay zero through construction, prepare and search on both
// paths, while the space counts the queries and candidates it copied. Only batched_fallbacks
// counts in the engine (MassiveTiesTakeTheSmallestIds).
TEST(CudaEngine, MovesNothingBetweenHostAndDeviceByItself) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const std::int64_t n = 4000, dim = 384;
  const int k = 10;
  for (Metric m : {Metric::kInnerProduct, Metric::kCosine}) {
    SCOPED_TRACE(mname(m));
    const Corpus c = make_corpus(random_floats(static_cast<size_t>(n * dim), 1100), n, dim, m, Dtype::kFloat32,
                                 shuffled_ids(n, 1101));
    Rig e = make_rig(c.input(), m, Dtype::kFloat32, limits(4, 16));
    const std::vector<float> q = random_floats(static_cast<size_t>(4 * dim), 1102);
    const auto one = run_candidates(e, q, 4, k, 1);
    const auto four = run_candidates(e, q, 4, k, 4);
    const TransferCounters t = e->transfer_counters();
    EXPECT_EQ(t.host_to_device, 0u);
    EXPECT_EQ(t.device_to_host, 0u) << "prepare/search must not copy to the host (status words aside)";
    EXPECT_EQ(t.batched_fallbacks, 0u);
    EXPECT_EQ(e.space->counters().host_to_device, 2u * 4 * dim * 4);
    EXPECT_EQ(e.space->counters().device_to_host, 2u * 4 * k * sizeof(Candidate));
    expect_same_candidates(four, one, "batch 4 vs batch 1");
    expect_within_tolerance(oracle_metric(m), c.stored, n, c.ids.data(), prepared(q, 4, dim, m), 4, dim, k,
                            to_answer(one, m, 4, k, k), std::string("counters ") + mname(m));
  }
}

// A search with an epilogue (the one-rank index's export: the space's split of the answer into
// mapped pinned memory) runs it inside the search's CUDA graph; the exported ids and scores
// equal a split queued after a plain search, bit for bit, on both paths (batch 1: the scan; 7
// and 64: tensor cores), on the graph's capture and on its replays with other queries.
TEST(CudaEngine, EpilogueInTheSearchGraphEqualsASplitAfterIt) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const std::int64_t n = 70000, dim = 100;
  const int k = 20;
  for (const Dtype t : {Dtype::kFloat16, Dtype::kFloat32})
    for (const Metric m : {Metric::kInnerProduct, Metric::kL2}) {
      const std::string what = std::string(mname(m)) + " " + dname(t);
      const Corpus c = make_corpus(random_floats(static_cast<size_t>(n * dim), 1700), n, dim, m, t,
                                   shuffled_ids(n, 1701));
      Rig e = make_rig(c.input(), m, t, limits(64, 32));
      SplitEpilogue inside(*e.space, m, 64, 32), after(*e.space, m, 64, 32);
      for (const int b : {1, 7, 64})
        for (int rep = 0; rep < 3; ++rep) {
          const std::string at = what + ", batch " + std::to_string(b) + ", call " + std::to_string(rep);
          const std::vector<float> q = random_floats(static_cast<size_t>(b * dim), 1710 + 10 * b + rep);
          stage(e, q.data(), b);
          search(e, b, k);
          after.enqueue(e.out, b, k, nullptr);
          e.space->synchronize();
          const Answer want = after.read(b, k);
          stage(e, q.data(), b);
          search(e, b, k, &inside);
          e.space->synchronize();
          const Answer got = inside.read(b, k);
          EXPECT_EQ(got.ids, want.ids) << at;
          std::vector<std::uint32_t> got_bits(got.scores.size()), want_bits(want.scores.size());
          std::transform(got.scores.begin(), got.scores.end(), got_bits.begin(), bits_of);
          std::transform(want.scores.begin(), want.scores.end(), want_bits.begin(), bits_of);
          EXPECT_EQ(got_bits, want_bits) << at;
          if (rep == 0 && b == 7)
            expect_within_tolerance(oracle_metric(m), c.stored, c.n, c.ids.data(), q, b, dim, k, got, at + " vs oracle");
        }
    }
}

// A search ordered on a caller's stream (here another space's) starts after the work queued
// there and gives the bits of a search on the engine's stream: a graph captured on the
// engine's stream is replayed on the caller's, one captured on the caller's stream serves it
// too, and the batched path's side stream forks from and joins back into the caller's stream.
// Batch 1 and 7, with and without CUDA graphs; small integers: the oracle's answer exactly.
TEST(CudaEngine, SearchesOnACallersStream) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const std::int64_t n = 20000, dim = 64;
  const int k = 16;
  const Corpus c = make_corpus(small_ints(static_cast<size_t>(n * dim), 1200, -2, 2), n, dim, Metric::kL2,
                               Dtype::kFloat32, shuffled_ids(n, 1201));
  for (const bool graphs : {true, false}) {
    EngineOptions opt;
    opt.cuda_graphs = graphs;
    Rig e = make_rig(c.input(), Metric::kL2, Dtype::kFloat32, limits(8, 16), opt);
    auto caller = make_cuda_space(test_device());
    float* cq = static_cast<float*>(caller->alloc(sizeof(float) * 8 * dim));
    Candidate* cout = static_cast<Candidate*>(caller->alloc(sizeof(Candidate) * 8 * k));
    for (const int b : {1, 7}) {
      const std::string what = std::string(graphs ? "graphs" : "no graphs") + ", batch " + std::to_string(b);
      const std::vector<float> q = small_ints(static_cast<size_t>(b * dim), 1202 + b, -2, 2);
      const std::vector<Candidate> want = run_candidates(e, q, b, k, b);
      expect_exact(Metric::kL2, c.stored, n, c.ids.data(), q, b, dim, k, to_answer(want, Metric::kL2, b, k, k), what);
      for (const bool own_buffers : {false, true}) {
        float* queries = own_buffers ? cq : e.queries;
        Candidate* out = own_buffers ? cout : e.out;
        caller->fill_pad(out, static_cast<std::int64_t>(b) * k);
        caller->from_host(queries, q.data(), sizeof(float) * b * dim, false);
        e->prepare_queries(queries, b, caller->stream());
        SearchArgs a;
        a.queries = queries;
        a.batch = b;
        a.k = k;
        a.out = out;
        a.stream = caller->stream();
        e->search(a);
        std::vector<Candidate> got(static_cast<size_t>(b) * k);
        caller->to_host(got.data(), out, got.size() * sizeof(Candidate), true);
        expect_same_candidates(got, want, what + (own_buffers ? ", the caller's buffers" : ", the engine's buffers"));
      }
    }
  }
}

// Options change no bit: without CUDA graphs, and with the path forced (batch 1 through the
// tensor-core path, batches through the scan), every answer equals the default engine's.
TEST(CudaEngine, PathAndGraphOptionsChangeNoBits) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const std::int64_t n = 30000, dim = 100, nq = 16;
  const int k = 20;
  const std::vector<float> raw = random_floats(static_cast<size_t>(n * dim), 1800);
  const std::vector<float> q = random_floats(static_cast<size_t>(nq * dim), 1801);
  for (const Dtype t : {Dtype::kFloat16, Dtype::kFloat32})
    for (const Metric m : {Metric::kInnerProduct, Metric::kL2}) {
      const std::string what = std::string(mname(m)) + " " + dname(t);
      const Corpus c = make_corpus(raw, n, dim, m, t, shuffled_ids(n, 1802));
      Rig base = make_rig(c.input(), m, t, limits(16, 32));
      const std::vector<Candidate> ref = run_candidates(base, q, nq, k, 1);
      expect_same_candidates(run_candidates(base, q, nq, k, 8), ref, what + ": batch 8");
      for (int variant = 0; variant < 3; ++variant) {
        EngineOptions opt;
        std::string v;
        if (variant == 0) opt.cuda_graphs = false, v = " without graphs";
        if (variant == 1) opt.search_path = SearchPath::kScan, v = " forced scan";
        if (variant == 2) opt.search_path = SearchPath::kGemm, v = " forced gemm";
        Rig e = make_rig(c.input(), m, t, limits(16, 32), opt);
        expect_same_candidates(run_candidates(e, q, nq, k, 1), ref, what + v + ": batch 1");
        expect_same_candidates(run_candidates(e, q, nq, k, 8), ref, what + v + ": batch 8");
      }
    }
}

// A streamed shard (ShardInput::streamed: the ids now, the rows in blocks through load_buffer,
// load_rows and finish_load) answers as the same rows given at once, bit for bit, with blocks
// in the engine's pinned buffers and in any host memory; out-of-order, oversized and missing
// blocks, a cosine stream and a value that overflows the storage type are refused by number.
TEST(CudaEngine, StreamedLoadEqualsTheRowsGivenAtOnce) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const std::int64_t n = 10007, dim = 33, block = 1000;
  const std::vector<float> q = random_floats(static_cast<size_t>(4 * dim), 1901);
  for (const Dtype t : {Dtype::kFloat16, Dtype::kFloat32})
    for (const Metric m : {Metric::kInnerProduct, Metric::kL2}) {
      const std::string what = std::string(mname(m)) + " " + dname(t);
      const Corpus c = make_corpus(random_floats(static_cast<size_t>(n * dim), 1900), n, dim, m, t,
                                   shuffled_ids(n, 1902));
      Rig whole = make_rig(c.input(), m, t, limits(4, 32));
      ShardInput s;
      s.rows = n;
      s.dim = dim;
      s.ids = c.ids.data();
      s.streamed = true;
      Rig st = make_rig(s, m, t, limits(4, 32));
      for (std::int64_t r0 = 0; r0 < n; r0 += block) {
        const std::int64_t rows = std::min(block, n - r0);
        if ((r0 / block) % 3 != 2) {
          float* buf = st->load_buffer(block);
          std::copy(c.rows.begin() + r0 * dim, c.rows.begin() + (r0 + rows) * dim, buf);
          st->load_rows(r0, rows, buf);
        } else {
          st->load_rows(r0, rows, c.rows.data() + r0 * dim);
        }
      }
      st->finish_load();
      expect_same_candidates(run_candidates(st, q, 4, 32, 1), run_candidates(whole, q, 4, 32, 1), what + " batch 1");
      expect_same_candidates(run_candidates(st, q, 4, 32, 4), run_candidates(whole, q, 4, 32, 4), what + " batch 4");
      EXPECT_NE(error_of([&] { st->finish_load(); }).find("streamed"), std::string::npos) << "the load has finished";
    }
  const Corpus c = make_corpus(random_floats(static_cast<size_t>(n * dim), 1903), n, dim, Metric::kInnerProduct,
                               Dtype::kFloat16, shuffled_ids(n, 1904));
  ShardInput s;
  s.rows = n;
  s.dim = dim;
  s.ids = c.ids.data();
  s.streamed = true;
  Rig bad = make_rig(s, Metric::kInnerProduct, Dtype::kFloat16, limits(4, 32));
  const std::string order = error_of([&] { bad->load_rows(5, 10, c.rows.data()); });
  EXPECT_NE(order.find("expected row 0"), std::string::npos) << order;
  const std::string range = error_of([&] { bad->load_buffer(n + 1); });
  EXPECT_NE(range.find(std::to_string(n + 1) + " rows out of range"), std::string::npos) << range;
  bad->load_buffer(100);
  const std::string larger = error_of([&] { bad->load_buffer(200); });
  EXPECT_NE(larger.find("more than the first call's 100"), std::string::npos) << larger;
  bad->load_rows(0, 10, c.rows.data());
  const std::string missing = error_of([&] { bad->finish_load(); });
  EXPECT_NE(missing.find("10 of " + std::to_string(n) + " rows loaded"), std::string::npos) << missing;
  // a value beyond float16's range: refused at the end of the load, naming the row's global id
  std::vector<float> rows = c.rows;
  rows[7 * dim + 3] = 1e6f;
  Rig over = make_rig(s, Metric::kInnerProduct, Dtype::kFloat16, limits(4, 32));
  over->load_rows(0, n, rows.data());
  const std::string ovf = error_of([&] { over->finish_load(); });
  EXPECT_NE(ovf.find("corpus row " + std::to_string(c.ids[7])), std::string::npos) << ovf;
  EXPECT_NE(ovf.find("overflows float16"), std::string::npos) << ovf;
  const std::string cos = error_of([&] { make_rig(s, Metric::kCosine, Dtype::kFloat32, limits(4, 32)); });
  EXPECT_NE(cos.find("cannot be cosine"), std::string::npos) << cos;
}

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
