// GPU tests of the CUDA engine, through the public API only (no CUDA headers): every result is
// compared with the float64 oracle by DESIGN.md's correctness terms, with the CPU engine, or
// with itself under another batch / chunking (bit-exact).
//
// Every test skips, saying so, when no GPU is visible. Under `mpirun -np P` each rank runs the
// whole binary on GPU (local rank mod GPU count); nothing here talks between ranks (that is
// test_nccl_comm.cpp).
//
// Case tables (why each row exists) are next to the INSTANTIATE_TEST_SUITE_P lines.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "shardtopk/engine.hpp"
#include "shardtopk/generator.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/merge.hpp"
#include "shardtopk/oracle.hpp"
#include "shardtopk/ordering.hpp"
#include "shardtopk/types.hpp"
#include "test_support.hpp"

namespace shardtopk::test {
namespace {

// ------------------------------------------------------------------------------ helpers

/// GPU for this process: the MPI local rank (when launched by mpirun) modulo the GPU count.
int test_device() {
  const char* names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"};
  int local = 0;
  for (const char* n : names) {
    if (const char* v = std::getenv(n)) {
      local = std::atoi(v);
      break;
    }
  }
  const int count = cuda_device_count();
  return count > 0 ? local % count : 0;
}

/// Rounds x to the nearest float16 / bfloat16 value (ties to even), computed independently of
/// src/common/half.hpp and of the device intrinsics: scale by the value's quantum (a power of two, so
/// the division is exact), round to an integer with nearbyint (round-half-even), scale back.
float round_through(Dtype dt, float x) {
  if (dt == Dtype::kFloat32 || x == 0.0f || !std::isfinite(x)) return x;
  const int mant_bits = dt == Dtype::kFloat16 ? 10 : 7;
  const int min_exp = dt == Dtype::kFloat16 ? -14 : -126;
  const int e = std::max(std::ilogb(x), min_exp);
  const double quantum = std::ldexp(1.0, e - mant_bits);
  return static_cast<float>(std::nearbyint(static_cast<double>(x) / quantum) * quantum);
}

std::vector<float> rounded(Dtype dt, std::vector<float> v) {
  for (auto& x : v) x = round_through(dt, x);
  return v;
}

/// Unique global ids that are NOT row positions (shuffled, spaced), so that any tie broken on a
/// shard-local index instead of the global id shows up.
std::vector<std::int64_t> shuffled_ids(std::int64_t n, std::uint64_t seed) {
  std::vector<std::int64_t> ids(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) ids[i] = 1000003 + 7 * i;
  std::mt19937_64 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  return ids;
}

const char* dname(Dtype d) { return d == Dtype::kFloat32 ? "f32" : d == Dtype::kFloat16 ? "f16" : "bf16"; }
const char* mname(Metric m) { return m == Metric::kInnerProduct ? "ip" : m == Metric::kCosine ? "cos" : "l2"; }

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

Metric oracle_metric(Metric m) { return m == Metric::kCosine ? Metric::kInnerProduct : m; }

EngineLimits limits(int batch_max, int k_max, int world = 1) {
  EngineLimits l;
  l.batch_max = batch_max;
  l.k_max = k_max;
  l.world_size = world;
  return l;
}

/// Runs nq host queries through a device engine in batches of `batch`: copy in, prepare,
/// search, copy the [b, k] candidates out. Returns the raw candidates [nq, k].
std::vector<Candidate> run_candidates(Engine& e, const std::vector<float>& queries, std::int64_t nq, int k,
                                      int batch) {
  const std::int64_t dim = e.dim();
  std::vector<Candidate> out(static_cast<size_t>(nq * k));
  for (std::int64_t q0 = 0; q0 < nq; q0 += batch) {
    const int b = static_cast<int>(std::min<std::int64_t>(batch, nq - q0));
    e.copy_from_host(e.query_buffer(), queries.data() + q0 * dim, sizeof(float) * b * dim);
    e.prepare_queries(e.query_buffer(), b);
    e.search(e.query_buffer(), b, k, e.local_buffer());
    e.copy_to_host(out.data() + q0 * k, e.local_buffer(), sizeof(Candidate) * b * k);
  }
  return out;
}

/// The first `kk` of every query's k candidates, in reported units.
Answer to_answer(const std::vector<Candidate>& c, Metric m, std::int64_t nq, int k, int kk) {
  Answer a;
  a.ids.resize(static_cast<size_t>(nq * kk));
  a.scores.resize(a.ids.size());
  for (std::int64_t q = 0; q < nq; ++q)
    for (int j = 0; j < kk; ++j) {
      a.ids[q * kk + j] = c[q * k + j].id;
      a.scores[q * kk + j] = reported_score(m, c[q * k + j].score);
    }
  return a;
}

/// Slots [kk, k) of every query must be padding (a shard with fewer rows than k).
void expect_padding(const std::vector<Candidate>& c, std::int64_t nq, int k, int kk, const std::string& what) {
  int bad = 0;
  for (std::int64_t q = 0; q < nq; ++q)
    for (int j = kk; j < k; ++j) {
      const Candidate& x = c[q * k + j];
      if (x.id != kPadId || !(std::isinf(x.score) && x.score < 0)) {
        if (++bad <= 3)
          ADD_FAILURE() << what << ": query " << q << " slot " << j << " should be padding, got id " << x.id
                        << " score " << x.score;
      }
    }
  EXPECT_EQ(bad, 0) << what;
}

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

void expect_same_candidates(const std::vector<Candidate>& a, const std::vector<Candidate>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].id != b[i].id || bits_of(a[i].score) != bits_of(b[i].score)) {
      if (++bad <= 5)
        ADD_FAILURE() << what << ": slot " << i << ": id " << a[i].id << " score " << a[i].score << " vs id "
                      << b[i].id << " score " << b[i].score;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << a.size() << " slots differ (ids or score bits)";
}

// ------------------------------------------------------------------------------ basic properties

TEST(CudaEngine, PropertiesAndBuffers) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  EXPECT_TRUE(built_with_cuda());
  const Corpus c = make_corpus(random_floats(100 * 16, 1), 100, 16, Metric::kL2, Dtype::kFloat16,
                               shuffled_ids(100, 2));
  auto e = make_cuda_engine(c.input(), Metric::kL2, Dtype::kFloat16, test_device(), limits(8, 32, 2));
  EXPECT_EQ(e->name(), "cuda");
  EXPECT_EQ(e->space(), MemSpace::kDevice);
  EXPECT_EQ(e->metric(), Metric::kL2);
  EXPECT_EQ(e->dtype(), Dtype::kFloat16);
  EXPECT_EQ(e->rows(), 100);
  EXPECT_EQ(e->dim(), 16);
  EXPECT_NE(e->stream(), nullptr);
  EXPECT_NE(e->query_buffer(), nullptr);
  EXPECT_NE(e->local_buffer(), nullptr);
  EXPECT_NE(e->gathered_buffer(), nullptr);
  EXPECT_NE(e->merged_buffer(), nullptr);
  // Buffers start as padding: reading them before any search gives valid candidates.
  std::vector<Candidate> g(2 * 8 * 32);
  e->copy_to_host(g.data(), e->gathered_buffer(), g.size() * sizeof(Candidate));
  expect_padding(g, 1, static_cast<int>(g.size()), 0, "fresh gathered buffer");
  EXPECT_NO_THROW(e->synchronize());
}

TEST(CudaEngine, ResidentBytesArePredicted) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  struct Row {
    std::int64_t n, dim;
    Dtype dt;
    EngineLimits lim;
  };
  // empty shard; one chunk; several chunks (batch_max large forces the smallest chunk); K > tile.
  const Row rows[] = {{0, 8, Dtype::kFloat32, limits(4, 16)},
                      {1000, 100, Dtype::kFloat16, limits(64, 1024, 4)},
                      {20000, 33, Dtype::kBFloat16, limits(1024, 64)},
                      {30000, 3, Dtype::kFloat32, limits(8, 8192)}};
  for (const Row& r : rows) {
    const Corpus c = make_corpus(random_floats(static_cast<size_t>(r.n * r.dim), 3), r.n, r.dim,
                                 Metric::kInnerProduct, r.dt, shuffled_ids(r.n, 4));
    auto e = make_cuda_engine(c.input(), Metric::kInnerProduct, r.dt, test_device(), r.lim);
    const std::uint64_t predicted = cuda_engine_device_bytes(r.n, r.dim, r.dt, r.lim);
    EXPECT_EQ(e->resident_bytes(), predicted) << "rows " << r.n << " dim " << r.dim;
    // The shard alone is a lower bound.
    EXPECT_GE(predicted, static_cast<std::uint64_t>(r.n * r.dim) * (r.dt == Dtype::kFloat32 ? 4 : 2));
  }
}

TEST(CudaEngine, ShardThatDoesNotFitSaysHowMuchAndWhatToDo) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  // 5·10^8 rows × 1024 float32 = 2 TB: never fits. The engine must refuse before touching data
  // (the data pointer below holds one row only).
  std::vector<float> one_row(1024, 1.0f);
  std::vector<std::int64_t> one_id(1, 0);
  const ShardInput in{one_row.data(), 500000000LL, 1024, one_id.data()};
  const std::string msg =
      error_of([&] { make_cuda_engine(in, Metric::kInnerProduct, Dtype::kFloat32, test_device(), limits(8, 16)); });
  EXPECT_NE(msg.find("needs"), std::string::npos) << msg;
  EXPECT_NE(msg.find("free"), std::string::npos) << msg;
  EXPECT_NE(msg.find("add ranks"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(cuda_engine_device_bytes(500000000LL, 1024, Dtype::kFloat32, limits(8, 16)))),
            std::string::npos)
      << msg;
}

TEST(CudaEngine, RejectsBadArguments) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  // small integers: the answer after the rejected calls must equal the oracle exactly
  const Corpus c = make_corpus(small_ints(50 * 8, 5), 50, 8, Metric::kInnerProduct, Dtype::kFloat32,
                               shuffled_ids(50, 6));
  // construction
  EXPECT_NE(error_of([&] {
              make_cuda_engine(ShardInput{c.rows.data(), 50, 0, c.ids.data()}, Metric::kInnerProduct,
                               Dtype::kFloat32, test_device(), limits(4, 8));
            }).find("dimension"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              make_cuda_engine(c.input(), Metric::kInnerProduct, Dtype::kFloat32, cuda_device_count() + 3,
                               limits(4, 8));
            }).find("does not exist"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              make_cuda_engine(ShardInput{nullptr, 50, 8, c.ids.data()}, Metric::kInnerProduct, Dtype::kFloat32,
                               test_device(), limits(4, 8));
            }),
            "<no exception>");
  // search / merge arguments: Error, and the engine keeps working
  auto e = make_cuda_engine(c.input(), Metric::kInnerProduct, Dtype::kFloat32, test_device(), limits(4, 8));
  const std::string k0 = error_of([&] { e->search(e->query_buffer(), 1, 0, e->local_buffer()); });
  EXPECT_NE(k0.find("k=0"), std::string::npos) << k0;
  const std::string k9 = error_of([&] { e->search(e->query_buffer(), 1, 9, e->local_buffer()); });
  EXPECT_NE(k9.find("k=9"), std::string::npos) << k9;
  const std::string b5 = error_of([&] { e->search(e->query_buffer(), 5, 1, e->local_buffer()); });
  EXPECT_NE(b5.find("batch of 5"), std::string::npos) << b5;
  EXPECT_NE(error_of([&] { e->merge(e->gathered_buffer(), 0, 1, 1, e->merged_buffer()); }), "<no exception>");
  EXPECT_NE(error_of([&] { e->prepare_queries(e->query_buffer(), 5); }), "<no exception>");
  const std::vector<float> q = small_ints(8, 7);
  const auto got = run_candidates(*e, q, 1, 8, 1);
  expect_exact(Metric::kInnerProduct, c.stored, c.n, c.ids.data(), q, 1, 8, 8,
               to_answer(got, Metric::kInnerProduct, 1, 8, 8), "after rejected calls");
}

// ------------------------------------------------------------------------------ prepare_queries

TEST(CudaEngine, CosineQueryNormalisationMatchesNormalizeRowsBitForBit) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  const std::int64_t dim = 1000, nq = 16;
  const Corpus c = make_corpus(random_floats(10 * dim, 8), 10, dim, Metric::kCosine, Dtype::kFloat32,
                               shuffled_ids(10, 9));
  auto e = make_cuda_engine(c.input(), Metric::kCosine, Dtype::kFloat32, test_device(), limits(static_cast<int>(nq), 4));
  std::vector<float> q = random_floats(static_cast<size_t>(nq * dim), 10);
  // magnitudes far from 1, tiny and huge, and a one-hot query
  for (std::int64_t d = 0; d < dim; ++d) {
    q[1 * dim + d] *= 1e-20f;
    q[2 * dim + d] *= 1e20f;
    q[3 * dim + d] = d == 17 ? -3.0f : 0.0f;
  }
  std::vector<float> host = q;
  normalize_rows(host.data(), nq, dim, 0, "query");
  e->copy_from_host(e->query_buffer(), q.data(), q.size() * sizeof(float));
  e->prepare_queries(e->query_buffer(), static_cast<int>(nq));
  std::vector<float> dev(q.size());
  e->copy_to_host(dev.data(), e->query_buffer(), dev.size() * sizeof(float));
  int bad = 0;
  for (size_t i = 0; i < dev.size(); ++i)
    if (bits_of(dev[i]) != bits_of(host[i]) && ++bad <= 5)
      ADD_FAILURE() << "query " << i / dim << " column " << i % dim << ": device " << dev[i] << " host " << host[i];
  EXPECT_EQ(bad, 0);
}

TEST(CudaEngine, PrepareQueriesRejectsNonFiniteAndZeroNormAndStaysUsable) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  const std::int64_t dim = 37;
  for (Metric m : {Metric::kInnerProduct, Metric::kCosine, Metric::kL2}) {
    SCOPED_TRACE(mname(m));
    const Corpus c = make_corpus(small_ints(200 * dim, 11, -2, 2), 200, dim, m, Dtype::kFloat32, shuffled_ids(200, 12));
    auto e = make_cuda_engine(c.input(), m, Dtype::kFloat32, test_device(), limits(4, 10));
    std::vector<float> q = small_ints(4 * dim, 13, 1, 2);  // no zero query
    auto submit = [&](const std::vector<float>& v) {
      return error_of([&] {
        e->copy_from_host(e->query_buffer(), v.data(), v.size() * sizeof(float));
        e->prepare_queries(e->query_buffer(), 4);
      });
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
    const auto got = run_candidates(*e, q, 4, 10, 4);
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

struct ExactCase {
  Dtype dtype;
  Metric metric;
  std::int64_t n, dim;
  int batch, k, k_max, batch_max;
  std::string name() const {
    std::ostringstream os;
    os << dname(dtype) << "_" << mname(metric) << "_n" << n << "_d" << dim << "_b" << batch << "_k" << k << "_bmax"
       << batch_max;
    return os.str();
  }
};

std::ostream& operator<<(std::ostream& os, const ExactCase& c) { return os << c.name(); }

std::vector<ExactCase> exact_cases() {
  struct Shape {
    std::int64_t n, dim;
    int batch, k, k_max, batch_max;
  };
  // n, dim, batch, k, k_max, batch_max         why
  const Shape shapes[] = {
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
  };
  std::vector<ExactCase> out;
  for (Dtype dt : {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16})
    for (Metric m : {Metric::kInnerProduct, Metric::kL2})
      for (const Shape& s : shapes) out.push_back({dt, m, s.n, s.dim, s.batch, s.k, s.k_max, s.batch_max});
  return out;
}

class ExactTies : public ::testing::TestWithParam<ExactCase> {};

// Small integers in [-2, 2]: every score is exact in float32 (and every value exact in float16
// and bfloat16), so ids must equal the oracle's exactly, ties (broken on shuffled global ids)
// included, and every score must equal the float64 score.
TEST_P(ExactTies, IdsAndScoresEqualTheOracle) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  const ExactCase& p = GetParam();
  const Corpus c = make_corpus(small_ints(static_cast<size_t>(p.n * p.dim), 100 + p.n + p.dim, -2, 2), p.n, p.dim,
                               p.metric, p.dtype, shuffled_ids(p.n, 200 + p.n));
  auto e = make_cuda_engine(c.input(), p.metric, p.dtype, test_device(), limits(p.batch_max, p.k_max));
  const std::vector<float> q = small_ints(static_cast<size_t>(p.batch * p.dim), 300 + p.dim, -2, 2);
  const auto got = run_candidates(*e, q, p.batch, p.k, p.batch);
  const int kk = static_cast<int>(std::min<std::int64_t>(p.k, p.n));
  if (kk > 0)
    expect_exact(p.metric, c.stored, c.n, c.ids.data(), q, p.batch, p.dim, kk,
                 to_answer(got, p.metric, p.batch, p.k, kk), p.name());
  expect_padding(got, p.batch, p.k, kk, p.name());
}

INSTANTIATE_TEST_SUITE_P(Gpu, ExactTies, ::testing::ValuesIn(exact_cases()),
                         [](const ::testing::TestParamInfo<ExactCase>& i) { return i.param.name(); });

// ------------------------------------------------------------------------------ random data

struct RandomCase {
  Dtype dtype;
  Metric metric;
  std::int64_t n, dim;
  int batch, k;
  std::string name() const {
    std::ostringstream os;
    os << dname(dtype) << "_" << mname(metric) << "_n" << n << "_d" << dim << "_b" << batch << "_k" << k;
    return os.str();
  }
};

std::ostream& operator<<(std::ostream& os, const RandomCase& c) { return os << c.name(); }

std::vector<RandomCase> random_cases() {
  struct Shape {
    std::int64_t n, dim;
    int batch, k;
  };
  // n, dim, batch, k      why
  const Shape shapes[] = {
      {3000, 100, 8, 10},    // typical small k
      {5000, 784, 4, 100},   // MNIST-like width
      {2000, 33, 16, 1024},  // K=1024, unaligned D
      {1500, 4099, 2, 20},   // D far beyond one shared-memory step, odd
  };
  std::vector<RandomCase> out;
  for (Dtype dt : {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16})
    for (Metric m : {Metric::kInnerProduct, Metric::kCosine, Metric::kL2})
      for (const Shape& s : shapes) out.push_back({dt, m, s.n, s.dim, s.batch, s.k});
  return out;
}

class RandomData : public ::testing::TestWithParam<RandomCase> {};

// Uniform floats in [-1, 1): within DESIGN.md's ε of the float64 oracle computed on the values
// the engine stores (rounded to float16/bfloat16 by an independent rounding); near-tie swaps
// are counted and printed.
TEST_P(RandomData, WithinToleranceOfTheOracle) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  const RandomCase& p = GetParam();
  const Corpus c = make_corpus(random_floats(static_cast<size_t>(p.n * p.dim), 400 + p.n), p.n, p.dim, p.metric,
                               p.dtype, shuffled_ids(p.n, 500 + p.n));
  auto e = make_cuda_engine(c.input(), p.metric, p.dtype, test_device(), limits(16, 1024));
  const std::vector<float> q = random_floats(static_cast<size_t>(p.batch * p.dim), 600 + p.dim);
  const auto got = run_candidates(*e, q, p.batch, p.k, 16);
  expect_within_tolerance(oracle_metric(p.metric), c.stored, c.n, c.ids.data(), prepared(q, p.batch, p.dim, p.metric),
                          p.batch, p.dim, p.k, to_answer(got, p.metric, p.batch, p.k, p.k), p.name());
}

INSTANTIATE_TEST_SUITE_P(Gpu, RandomData, ::testing::ValuesIn(random_cases()),
                         [](const ::testing::TestParamInfo<RandomCase>& i) { return i.param.name(); });

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
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  const DtypeMetric& p = GetParam();
  for (std::int64_t dim : {100LL, 37LL}) {
    const std::int64_t n = 6000, nq = 16;
    const int k = 100;
    const std::string what = p.name() + "_d" + std::to_string(dim);
    const Corpus c = make_corpus(random_floats(static_cast<size_t>(n * dim), 700 + dim), n, dim, p.metric, p.dtype,
                                 shuffled_ids(n, 701));
    auto gpu = make_cuda_engine(c.input(), p.metric, p.dtype, test_device(), limits(16, 128));
    auto cpu = make_cpu_engine(c.input(), p.metric, p.dtype, 2, limits(16, 128));
    const std::vector<float> q = random_floats(static_cast<size_t>(nq * dim), 702);
    const Answer g = to_answer(run_candidates(*gpu, q, nq, k, 16), p.metric, nq, k, k);
    const Answer h = to_answer(run_candidates(*cpu, q, nq, k, 16), p.metric, nq, k, k);
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
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  const DtypeMetric& p = GetParam();
  const std::int64_t n = 70000, dim = 100, nq = 256;
  const int k = 50;
  const Corpus c = make_corpus(random_floats(static_cast<size_t>(n * dim), 800), n, dim, p.metric, p.dtype,
                               shuffled_ids(n, 801));
  auto e = make_cuda_engine(c.input(), p.metric, p.dtype, test_device(), limits(256, 64));
  const std::vector<float> q = random_floats(static_cast<size_t>(nq * dim), 802);
  const auto single = run_candidates(*e, q, nq, k, 1);
  for (int b : {2, 7, 64, 256})
    expect_same_candidates(run_candidates(*e, q, nq, k, b), single,
                           p.name() + ": batch " + std::to_string(b) + " vs alone");
  // one query at every position of a batch of 7 whose other queries change
  const std::int64_t probe = 5;
  for (int pos = 0; pos < 7; ++pos) {
    std::vector<float> batch = random_floats(static_cast<size_t>(7 * dim), 900 + pos);
    std::copy(q.begin() + probe * dim, q.begin() + (probe + 1) * dim, batch.begin() + pos * dim);
    const auto got = run_candidates(*e, batch, 7, k, 7);
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

// Adversarial inputs for the batched path's filter (docs/EXACTNESS.md): rows that are one base
// vector plus tiny perturbations, so hundreds of scores crowd the k-th within the filter's
// margin; large norms (×1000) and mixed signs. The batched answer must equal the batch-1 scan's
// bit for bit and be within ε of the float64 oracle.
TEST_P(FilterBound, NearTiesLargeNormsMixedSigns) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  const DtypeMetric& p = GetParam();
  const std::int64_t n = 20000, dim = 96, nq = 8;
  const int k = 100;
  std::vector<float> base;
  const std::vector<float> raw = near_tie_rows(n, dim, 1300, 1e-3f, 7, 1000.0f, &base);
  const Corpus c = make_corpus(raw, n, dim, p.metric, p.dtype, shuffled_ids(n, 1302));
  auto e = make_cuda_engine(c.input(), p.metric, p.dtype, test_device(), limits(8, 128));
  const std::vector<float> q = near_base_queries(base, nq, dim, 1303);
  const auto batched = run_candidates(*e, q, nq, k, 8);
  const auto single = run_candidates(*e, q, nq, k, 1);
  expect_same_candidates(batched, single, p.name() + ": batched vs batch 1");
  expect_within_tolerance(oracle_metric(p.metric), c.stored, c.n, c.ids.data(), prepared(q, nq, dim, p.metric), nq,
                          dim, k, to_answer(batched, p.metric, nq, k, k), p.name() + " vs oracle");
}

// The batched GEMM of float16 shards writes __half (largest finite value 65,504). The engine
// scales each query so that no output can overflow (an inf would flood the candidate pool and
// push the query onto the batch-1 fallback) and charges the output's rounding to Δ. Rows with
// elements near half's range and queries from 1e-30 to 1e30 (‖q‖ · max‖x‖ up to ~1e35, near the
// admission bound FLT_MAX / 2; l2 up to 1e15 so that (‖q‖ + max‖x‖)² stays admissible) must give
// the batch-1 bits and the oracle's answer for every storage type and metric, and no fallback for
// inner product (without the scale cap, float16's outputs overflow and all of them fall back).
TEST_P(FilterBound, ExtremeNormsNeitherOverflowNorFallBack) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  const DtypeMetric& p = GetParam();
  const std::int64_t n = 20000, dim = 96, nq = 6;
  const int k = 50;
  std::vector<float> base;
  const std::vector<float> raw = near_tie_rows(n, dim, 1310, 1e-2f, 5, 2.0e4f, &base);  // elements up to ~2e4
  const Corpus c = make_corpus(raw, n, dim, p.metric, p.dtype, shuffled_ids(n, 1312));
  auto e = make_cuda_engine(c.input(), p.metric, p.dtype, test_device(), limits(8, 128));
  const float big = p.metric == Metric::kL2 ? 1e15f : 1e30f;
  const float qscale[nq] = {big, -big, 1.0f, -1.0f, 1e-30f, -1e-30f};
  std::vector<float> q(static_cast<size_t>(nq * dim));
  const std::vector<float> qn = random_floats(static_cast<size_t>(nq * dim), 1313);
  for (std::int64_t i = 0; i < nq; ++i)
    for (std::int64_t d = 0; d < dim; ++d) q[i * dim + d] = qscale[i] * (base[d] + 1e-1f * qn[i * dim + d]);
  e->reset_transfer_counters();
  const auto batched = run_candidates(*e, q, nq, k, nq);
  // Inner product only: cosine normalises both sides (no extreme norms remain, and its rows all
  // point one way, so they flood the pool), and for l2 a query norm of 1e15 puts every distance
  // within Δ of the k-th (u · ‖q‖² ≫ the spread 2 ‖q‖ · ‖x‖): the fallback is the right answer.
  if (p.metric == Metric::kInnerProduct)
    EXPECT_EQ(e->transfer_counters().batched_fallbacks, 0u)
        << p.name() << ": a query left the batched path (an output overflowed or the pool flooded)";
  const auto single = run_candidates(*e, q, nq, k, 1);
  expect_same_candidates(batched, single, p.name() + ": batched vs batch 1");
  expect_within_tolerance(oracle_metric(p.metric), c.stored, c.n, c.ids.data(), prepared(q, nq, dim, p.metric), nq,
                          dim, k, to_answer(batched, p.metric, nq, k, k), p.name() + " vs oracle");
}

// Chunk shapes the sizes above never make: a shard of 37 rows (the first chunk only), 8,192 + 37
// rows (a 37-row second chunk: cuBLAS splits such a GEMM over d and, with float16 output, rounds
// each partial sum to float16, which Δ charges; and the filter's scalar path, 37 not being a
// multiple of its 8-value loads) and 20,003 rows (an 11,811-row last chunk), at D = 768 with near-tied
// rows, batches of 64 and 8: batched equals batch 1 bit for bit and the float64 oracle.
TEST_P(FilterBound, OddChunkShapesSmallShardsAndTails) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  const DtypeMetric& p = GetParam();
  const std::int64_t dim = 768, nq = 64;
  const int k = 10;
  for (const std::int64_t n : {std::int64_t{37}, std::int64_t{8192 + 37}, std::int64_t{20003}}) {
    std::vector<float> base;
    const std::vector<float> raw = near_tie_rows(n, dim, 1320, 1e-3f, 7, 1000.0f, &base);
    const Corpus c = make_corpus(raw, n, dim, p.metric, p.dtype, shuffled_ids(n, 1322));
    auto e = make_cuda_engine(c.input(), p.metric, p.dtype, test_device(), limits(64, 16));
    const std::vector<float> q = near_base_queries(base, nq, dim, 1323);
    const std::string what = p.name() + " n=" + std::to_string(n);
    const auto single = run_candidates(*e, q, nq, k, 1);
    for (const int batch : {64, 8}) {
      const auto batched = run_candidates(*e, q, nq, k, batch);
      expect_same_candidates(batched, single, what + ": batch " + std::to_string(batch) + " vs batch 1");
    }
    expect_within_tolerance(oracle_metric(p.metric), c.stored, c.n, c.ids.data(), prepared(q, nq, dim, p.metric), nq,
                            dim, k, to_answer(single, p.metric, nq, k, k), what + " vs oracle");
  }
}

INSTANTIATE_TEST_SUITE_P(Gpu, FilterBound, ::testing::ValuesIn(dtype_metrics()),
                         [](const ::testing::TestParamInfo<DtypeMetric>& i) { return i.param.name(); });

// More rows tie at the k-th score than the final sort holds (the batch-1 slow path, and the
// batched path's fallback to it): every row equal, so the answer is the k smallest ids.
TEST(CudaEngine, MassiveTiesTakeTheSmallestIds) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  const std::int64_t n = 50000, dim = 8;
  const int k = 100;
  std::vector<float> raw(static_cast<size_t>(n * dim), 0.5f);
  for (std::int64_t r = 0; r < 40; ++r) raw[(r * 997) * dim] = 2.0f;  // 40 rows above the tie
  const Corpus c = make_corpus(raw, n, dim, Metric::kInnerProduct, Dtype::kFloat32, shuffled_ids(n, 1400));
  auto e = make_cuda_engine(c.input(), Metric::kInnerProduct, Dtype::kFloat32, test_device(), limits(4, 128));
  const std::vector<float> q(static_cast<size_t>(4 * dim), 1.0f);
  for (int b : {1, 4}) {
    const auto got = run_candidates(*e, q, 4, k, b);
    expect_exact(Metric::kInnerProduct, c.stored, c.n, c.ids.data(), q, 4, dim, k,
                 to_answer(got, Metric::kInnerProduct, 4, k, k), "massive ties, batch " + std::to_string(b));
  }
  // search_and_export (the one-rank index's call) queues the export before the batched path's
  // overflow check; here every pool overflows, so the export must be queued again after the
  // fallback: its ids and scores equal search()'s list, not the overflowed pools'.
  const std::uint64_t fallbacks = e->transfer_counters().batched_fallbacks;
  EXPECT_GT(fallbacks, 0u) << "the tied rows were meant to overflow the batched pools";
  const std::vector<Candidate> listed = run_candidates(*e, q, 4, k, 4);
  e->copy_from_host(e->query_buffer(), q.data(), sizeof(float) * q.size());
  e->prepare_queries(e->query_buffer(), 4);
  const std::uint64_t d2h = e->transfer_counters().device_to_host;
  e->search_and_export(e->query_buffer(), 4, k, e->local_buffer());
  e->synchronize();
  EXPECT_EQ(e->transfer_counters().device_to_host - d2h, 4u * k * 12u) << "the export is counted once";
  std::vector<std::int64_t> ids(4 * k);
  std::vector<float> scores(ids.size());
  e->read_export(ids.data(), scores.data());
  EXPECT_GT(e->transfer_counters().batched_fallbacks, fallbacks + 4) << "search_and_export took the fallback";
  const Answer want = to_answer(listed, Metric::kInnerProduct, 4, k, k);
  EXPECT_EQ(ids, want.ids);
  EXPECT_EQ(scores, want.scores);
}

// The batch-1 scan's two schedules (a persistent grid striding over the shard; blocks of 1,024
// contiguous rows, which shards of ≥ 8 waves of such blocks take) score every row with the same
// arithmetic: the same candidates bit for bit, and the float64 oracle's answer. D = 100 (a
// partial last chunk; 300,001 rows: a partial last block and an unpaired last row), 768 and
// 1,500 (2 or more chunks per lane, several passes of the chunk loop for float32), every storage
// type and both metrics. Either schedule reads the shard forward with plain loads or, alternating
// between searches, forward and last row first with L2 hints: with three queries run twice, each
// query is searched once in each direction. The scan's rows per warp (8, two side by side, up
// to 16 chunks of 16 bytes per row: D = 64 float16 / float32, 100 float16; 8 up to 32 chunks:
// D = 200 float16, 100 float32; 4 up to 64: D = 384 float16, 200 float32; 2 above) give the same
// bits as 2 rows per warp of 32 lanes at every D (SHARDTOPK_SCAN_ROWS=2).
TEST(CudaEngine, ScanSchedulesAgreeBitForBit) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  const int nq = 3, k = 100;
  for (const auto& [n, dim] : {std::pair<std::int64_t, std::int64_t>{300001, 100},
                               {50001, 64},
                               {30001, 200},
                               {40001, 384},
                               {20003, 768},
                               {5001, 1500}}) {
    const std::vector<float> raw = random_floats(static_cast<size_t>(n * dim), 1600);
    const std::vector<float> q = random_floats(static_cast<size_t>(nq * dim), 1601);
    for (const Dtype t : {Dtype::kFloat16, Dtype::kFloat32, Dtype::kBFloat16})
      for (const Metric m : {Metric::kInnerProduct, Metric::kL2}) {
        const Corpus c = make_corpus(raw, n, dim, m, t, shuffled_ids(n, 1602));
        const std::string what = std::string(mname(m)) + " " + dname(t) + " D=" + std::to_string(dim);
        std::vector<Candidate> ref;
        for (int variant = 0; variant < 6; ++variant) {
          const bool blocked = variant & 1, alternate = variant & 2, two_rows = variant & 4;
          ::setenv("SHARDTOPK_SCAN_SCHEDULE", blocked ? "blocked" : "persistent", 1);
          if (two_rows) ::setenv("SHARDTOPK_SCAN_ROWS", "2", 1);
          ::setenv("SHARDTOPK_SCAN_L2", alternate ? "1" : "0", 1);
          auto e = make_cuda_engine(c.input(), m, t, test_device(), limits(4, 128));
          ::unsetenv("SHARDTOPK_SCAN_L2");  // these two are read by the constructor; the schedule,
          ::unsetenv("SHARDTOPK_SCAN_ROWS");  // by each search
          const std::string v = what + (blocked ? " blocked" : " persistent") + (alternate ? " alternating" : " forward") +
                                (two_rows ? " 2 rows per warp" : "");
          for (int run = 0; run < (alternate ? 2 : 1); ++run) {
            const std::vector<Candidate> got = run_candidates(*e, q, nq, k, 1);
            if (ref.empty()) {
              ref = got;
              expect_within_tolerance(oracle_metric(m), c.stored, c.n, c.ids.data(), prepared(q, nq, dim, m), nq,
                                      dim, k, to_answer(got, m, nq, k, k), v + " vs oracle");
            } else {
              expect_same_candidates(got, ref, v + " run " + std::to_string(run) + " vs persistent forward");
            }
          }
          ::unsetenv("SHARDTOPK_SCAN_SCHEDULE");
        }
      }
  }
}

// A generated shard (made on the device) equals the same rows generated on the host.
TEST(CudaEngine, GeneratedShardEqualsHostRows) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
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
    auto a = make_cuda_engine(c.input(), m, Dtype::kFloat16, test_device(), limits(4, 32));
    auto b = make_cuda_engine(gen, m, Dtype::kFloat16, test_device(), limits(4, 32));
    const std::vector<float> q = random_floats(static_cast<size_t>(4 * dim), 1500);
    expect_same_candidates(run_candidates(*a, q, 4, 32, 4), run_candidates(*b, q, 4, 32, 4),
                           std::string("generated vs host rows ") + mname(m));
  }
}

// ------------------------------------------------------------------------------ device merge

struct MergeCase {
  int parts, k;
  int mode;  // 0: random scores, 1: all scores equal, 2: three distinct scores
  std::string name() const {
    static const char* modes[] = {"random", "all_equal", "three_values"};
    return "p" + std::to_string(parts) + "_k" + std::to_string(k) + "_" + modes[mode];
  }
};

std::ostream& operator<<(std::ostream& os, const MergeCase& c) { return os << c.name(); }

std::vector<MergeCase> merge_cases() {
  std::vector<MergeCase> out;
  for (int parts : {1, 2, 3, 8, 64})
    for (int k : {1, 7, 100, 1024})
      for (int mode : {0, 1, 2}) out.push_back({parts, k, mode});
  return out;
}

class DeviceMerge : public ::testing::TestWithParam<MergeCase> {};

// Lists [parts, batch, k], each sorted best first with a varying number of real candidates
// (0 .. k) followed by padding, ids unique across lists; the device merge must equal
// merge_topk_host bit for bit.
TEST_P(DeviceMerge, EqualsHostMerge) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  const MergeCase& p = GetParam();
  const int batch = 5;
  auto e = make_cuda_engine(ShardInput{nullptr, 0, 4, nullptr}, Metric::kInnerProduct, Dtype::kFloat32,
                            test_device(), limits(batch, 1024, 64));
  std::mt19937_64 rng(1000 + p.parts * 7 + p.k + p.mode);
  std::vector<std::int64_t> ids(static_cast<size_t>(p.parts) * batch * p.k);
  std::iota(ids.begin(), ids.end(), 5000);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::uniform_real_distribution<float> score(-10.0f, 10.0f);
  std::vector<Candidate> lists(ids.size());
  size_t next = 0;
  for (int part = 0; part < p.parts; ++part)
    for (int b = 0; b < batch; ++b) {
      Candidate* l = lists.data() + (static_cast<size_t>(part) * batch + b) * p.k;
      const int real = (part * 37 + b * 11 + p.k / 2) % (p.k + 1);
      for (int j = 0; j < p.k; ++j) {
        if (j >= real) {
          l[j] = pad_candidate();
          continue;
        }
        const float s = p.mode == 0 ? score(rng) : p.mode == 1 ? 0.25f : static_cast<float>(rng() % 3);
        l[j] = Candidate{s, ids[next++]};
      }
      std::sort(l, l + p.k, [](const Candidate& a, const Candidate& b2) { return better(a, b2); });
    }
  std::vector<Candidate> want(static_cast<size_t>(batch) * p.k);
  merge_topk_host(lists.data(), p.parts, batch, p.k, want.data());
  e->copy_from_host(e->gathered_buffer(), lists.data(), lists.size() * sizeof(Candidate));
  e->merge(e->gathered_buffer(), p.parts, batch, p.k, e->merged_buffer());
  std::vector<Candidate> got(want.size());
  e->copy_to_host(got.data(), e->merged_buffer(), got.size() * sizeof(Candidate));
  expect_same_candidates(got, want, p.name());
}

INSTANTIATE_TEST_SUITE_P(Gpu, DeviceMerge, ::testing::ValuesIn(merge_cases()),
                         [](const ::testing::TestParamInfo<MergeCase>& i) { return i.param.name(); });

// ------------------------------------------------------------------------------ data path

TEST(CudaEngine, TransferCountersCountOnlyQueryAndResultTraffic) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  const std::int64_t n = 4000, dim = 384;
  const int k = 10;
  for (Metric m : {Metric::kInnerProduct, Metric::kCosine}) {
    SCOPED_TRACE(mname(m));
    const Corpus c = make_corpus(random_floats(static_cast<size_t>(n * dim), 1100), n, dim, m, Dtype::kFloat32,
                                 shuffled_ids(n, 1101));
    auto e = make_cuda_engine(c.input(), m, Dtype::kFloat32, test_device(), limits(4, 16));
    // construction (the shard upload) is not query traffic
    EXPECT_EQ(e->transfer_counters().host_to_device, 0u);
    EXPECT_EQ(e->transfer_counters().device_to_host, 0u);
    const std::vector<float> q = random_floats(static_cast<size_t>(dim), 1102);
    e->reset_transfer_counters();
    e->copy_from_host(e->query_buffer(), q.data(), dim * sizeof(float));
    EXPECT_EQ(e->transfer_counters().host_to_device, static_cast<std::uint64_t>(dim) * 4);
    EXPECT_EQ(e->transfer_counters().device_to_host, 0u);
    e->prepare_queries(e->query_buffer(), 1);
    e->search(e->query_buffer(), 1, k, e->local_buffer());
    e->copy_within(e->merged_buffer(), e->local_buffer(), k * sizeof(Candidate));  // not counted
    e->merge(e->local_buffer(), 1, 1, k, e->merged_buffer());
    e->synchronize();
    EXPECT_EQ(e->transfer_counters().host_to_device, static_cast<std::uint64_t>(dim) * 4);
    EXPECT_EQ(e->transfer_counters().device_to_host, 0u) << "prepare/search/merge must not copy to the host";
    std::vector<Candidate> out(k);
    e->copy_to_host(out.data(), e->merged_buffer(), k * sizeof(Candidate));
    EXPECT_EQ(e->transfer_counters().device_to_host, static_cast<std::uint64_t>(k) * sizeof(Candidate));
    e->reset_transfer_counters();
    EXPECT_EQ(e->transfer_counters().host_to_device, 0u);
    // and the answer is right
    expect_within_tolerance(oracle_metric(m), c.stored, n, c.ids.data(), prepared(q, 1, dim, m), 1, dim, k,
                            to_answer(out, m, 1, k, k), std::string("counters ") + mname(m));
  }
}

// The one-rank index's call: search_and_export queues search and export as one CUDA graph (the
// export kernel writes ids and scores into mapped pinned memory). Its answer equals search() and
// then export_results() bit for bit on both paths (batch 1: scan; 7 and 64: tensor cores), on
// the graph's first use and on replays with other queries; the counters see exactly the queries
// and the [batch, k] ids and scores.
TEST(CudaEngine, SearchAndExportEqualsSearchThenExport) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  const std::int64_t n = 70000, dim = 100;
  const int k = 20;
  for (const Dtype t : {Dtype::kFloat16, Dtype::kFloat32})
    for (const Metric m : {Metric::kInnerProduct, Metric::kL2}) {
      const std::string what = std::string(mname(m)) + " " + dname(t);
      const Corpus c = make_corpus(random_floats(static_cast<size_t>(n * dim), 1700), n, dim, m, t,
                                   shuffled_ids(n, 1701));
      auto e = make_cuda_engine(c.input(), m, t, test_device(), limits(64, 32));
      for (const int b : {1, 7, 64})
        for (int rep = 0; rep < 3; ++rep) {
          const std::string at = what + ", batch " + std::to_string(b) + ", call " + std::to_string(rep);
          const std::vector<float> q = random_floats(static_cast<size_t>(b * dim), 1710 + 10 * b + rep);
          std::vector<std::int64_t> ids(static_cast<size_t>(b) * k, -7), want_ids(ids.size());
          std::vector<float> scores(ids.size()), want_scores(ids.size());
          e->stage_queries(q.data(), b);
          e->search(e->query_buffer(), b, k, e->local_buffer());
          e->export_results(e->local_buffer(), b, k, want_ids.data(), want_scores.data());
          e->reset_transfer_counters();
          e->stage_queries(q.data(), b);
          e->search_and_export(e->query_buffer(), b, k, e->local_buffer());
          e->synchronize();
          e->read_export(ids.data(), scores.data());
          EXPECT_EQ(ids, want_ids) << at;
          std::vector<std::uint32_t> got_bits(scores.size()), want_bits(scores.size());
          std::transform(scores.begin(), scores.end(), got_bits.begin(), bits_of);
          std::transform(want_scores.begin(), want_scores.end(), want_bits.begin(), bits_of);
          EXPECT_EQ(got_bits, want_bits) << at;
          EXPECT_EQ(e->transfer_counters().host_to_device, static_cast<std::uint64_t>(b) * dim * 4) << at;
          EXPECT_EQ(e->transfer_counters().device_to_host, static_cast<std::uint64_t>(b) * k * 12) << at;
          if (rep == 0 && b == 7) {
            Answer a;
            a.ids = ids;
            a.scores = scores;
            expect_within_tolerance(oracle_metric(m), c.stored, c.n, c.ids.data(), q, b, dim, k, a, at + " vs oracle");
          }
        }
    }
}

TEST(CudaEngine, CopyWithinTakesDeviceQueries) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  // The index's search_device path: queries already in device memory are copied into the
  // query buffer with copy_within, then prepared (validated) and searched.
  const std::int64_t n = 1000, dim = 64;
  const Corpus c = make_corpus(small_ints(static_cast<size_t>(n * dim), 1200, -2, 2), n, dim, Metric::kL2,
                               Dtype::kFloat32, shuffled_ids(n, 1201));
  auto e = make_cuda_engine(c.input(), Metric::kL2, Dtype::kFloat32, test_device(), limits(4, 16, 4));
  const std::vector<float> q = small_ints(static_cast<size_t>(2 * dim), 1202, -2, 2);
  // stage the "caller's" device queries in the gathered buffer (any device memory will do)
  e->copy_from_host(e->gathered_buffer(), q.data(), q.size() * sizeof(float));
  e->reset_transfer_counters();
  e->copy_within(e->query_buffer(), e->gathered_buffer(), q.size() * sizeof(float));
  e->prepare_queries(e->query_buffer(), 2);
  e->search(e->query_buffer(), 2, 16, e->local_buffer());
  std::vector<Candidate> out(32);
  e->copy_to_host(out.data(), e->local_buffer(), out.size() * sizeof(Candidate));
  EXPECT_EQ(e->transfer_counters().host_to_device, 0u);
  expect_exact(Metric::kL2, c.stored, n, c.ids.data(), q, 2, dim, 16, to_answer(out, Metric::kL2, 2, 16, 16),
               "copy_within queries");
}

// ------------------------------------------------------------------------------ real vectors

class BgeM3 : public ::testing::TestWithParam<DtypeMetric> {};

// 500 bge-m3 paragraph embeddings as the corpus, 500 sentence embeddings as queries (about 40
// near-identical pairs: real near-ties). Within ε of the oracle, k = 10 and 100, in batches of
// 64 (tensor-core path) and bit-identical to batch 1.
TEST_P(BgeM3, WithinToleranceOfTheOracle) {
  if (!shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA engine test skipped";
  const DtypeMetric& p = GetParam();
  const std::int64_t n = 500, nq = 500, dim = 1024;
  const std::vector<float> corpus = read_raw_f32(bge_dir() + "/paragraphs-1024.f32", n, dim);
  const std::vector<float> queries = read_raw_f32(bge_dir() + "/sentences-1024.f32", nq, dim);
  std::vector<std::int64_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  const Corpus c = make_corpus(corpus, n, dim, p.metric, p.dtype, ids);
  auto e = make_cuda_engine(c.input(), p.metric, p.dtype, test_device(), limits(64, 128));
  for (int k : {10, 100}) {
    const auto got = run_candidates(*e, queries, nq, k, 64);
    expect_within_tolerance(oracle_metric(p.metric), c.stored, n, c.ids.data(), prepared(queries, nq, dim, p.metric),
                            nq, dim, k, to_answer(got, p.metric, nq, k, k),
                            "bge-m3 " + p.name() + " k=" + std::to_string(k));
    expect_same_candidates(got, run_candidates(*e, queries, nq, k, 1), "bge-m3 batch 64 vs 1 " + p.name());
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
