#pragma once
// Helpers of the CUDA engine's tests that need no CUDA header: the GPU a test process uses,
// corpora as the engine stores them (an independent float16/bfloat16 rounding), ids that are
// not row positions, bit-exact comparison of candidate lists, and conversion to the oracle's
// reported units. The oracle comparisons themselves are test_support.hpp's.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "shardtopk/engine.hpp"
#include "shardtopk/ordering.hpp"
#include "shardtopk/types.hpp"
#include "test_support.hpp"

/// Every GPU test starts with this: without a GPU the case is skipped, and says so.
#define SHARDTOPK_SKIP_WITHOUT_GPU()                                                       \
  do {                                                                                     \
    if (!::shardtopk::cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA test skipped"; \
  } while (0)

namespace shardtopk::test {

/// GPU for this process: the MPI local rank (when launched by mpirun) modulo the GPU count.
inline int test_device() {
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
/// src/core/half.hpp and of the device intrinsics: scale by the value's quantum (a power of
/// two, so the division is exact), round to an integer with nearbyint (round-half-even), scale
/// back. Values beyond the type's range come back as they are (callers avoid them).
inline float round_through(Dtype dt, float x) {
  if (dt == Dtype::kFloat32 || x == 0.0f || !std::isfinite(x)) return x;
  const int mant_bits = dt == Dtype::kFloat16 ? 10 : 7;
  const int min_exp = dt == Dtype::kFloat16 ? -14 : -126;
  const int e = std::max(std::ilogb(x), min_exp);
  const double quantum = std::ldexp(1.0, e - mant_bits);
  return static_cast<float>(std::nearbyint(static_cast<double>(x) / quantum) * quantum);
}

inline std::vector<float> rounded(Dtype dt, std::vector<float> v) {
  for (auto& x : v) x = round_through(dt, x);
  return v;
}

/// Unique global ids that are NOT row positions (shuffled, spaced), so that any tie broken on a
/// shard-local index instead of the global id shows up.
inline std::vector<std::int64_t> shuffled_ids(std::int64_t n, std::uint64_t seed) {
  std::vector<std::int64_t> ids(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) ids[i] = 1000003 + 7 * i;
  std::mt19937_64 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  return ids;
}

inline const char* dname(Dtype d) { return d == Dtype::kFloat32 ? "f32" : d == Dtype::kFloat16 ? "f16" : "bf16"; }
inline const char* mname(Metric m) {
  return m == Metric::kInnerProduct ? "ip" : m == Metric::kCosine ? "cos" : "l2";
}

/// The oracle's metric for what the engine computes: cosine is the inner product of rows and
/// queries normalised beforehand.
inline Metric oracle_metric(Metric m) { return m == Metric::kCosine ? Metric::kInnerProduct : m; }

inline std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

/// The order-preserving key of a score (score.cuh's score_key: −0 as +0): keys compare as the
/// scores do; the kernels' histograms bin its top bits.
inline std::uint32_t key_of(float s) {
  const std::uint32_t b = bits_of(s + 0.0f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/// Same ids and bit-identical scores, slot by slot; names the first differing slots.
inline void expect_same_candidates(const std::vector<Candidate>& a, const std::vector<Candidate>& b,
                                   const std::string& what) {
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

/// The first `kk` of every query's k candidates [nq, k], in reported units.
inline Answer to_answer(const std::vector<Candidate>& c, Metric m, std::int64_t nq, int k, int kk) {
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

/// Slots [kk, k) of every query of c [nq, k] must be padding (fewer rows than k).
inline void expect_padding(const std::vector<Candidate>& c, std::int64_t nq, int k, int kk, const std::string& what) {
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

/// One configuration of a parametrised search test: storage type, metric, shard shape, batch,
/// k and the engine's limits.
struct SearchCase {
  Dtype dtype;
  Metric metric;
  std::int64_t n, dim;
  int batch, k, k_max, batch_max;
  std::string name() const {
    std::ostringstream os;
    os << dname(dtype) << "_" << mname(metric) << "_n" << n << "_d" << dim << "_b" << batch << "_k" << k << "_kmax"
       << k_max << "_bmax" << batch_max;
    return os.str();
  }
};
inline std::ostream& operator<<(std::ostream& os, const SearchCase& c) { return os << c.name(); }
inline std::string case_name(const ::testing::TestParamInfo<SearchCase>& i) { return i.param.name(); }

/// A row of a case table: n, dim, batch, k, k_max, batch_max.
struct CaseShape {
  std::int64_t n, dim;
  int batch, k, k_max, batch_max;
};

/// Every shape of a table for every storage type and each of `metrics`.
inline std::vector<SearchCase> search_cases(const std::vector<CaseShape>& shapes, const std::vector<Metric>& metrics) {
  std::vector<SearchCase> out;
  for (Dtype dt : {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16})
    for (Metric m : metrics)
      for (const CaseShape& s : shapes) out.push_back({dt, m, s.n, s.dim, s.batch, s.k, s.k_max, s.batch_max});
  return out;
}

/// Exact-arithmetic check (small-integer inputs) of candidates [nq, k] against the float64
/// oracle over `stored` rows, plus padding beyond min(k, n).
inline void expect_exact_candidates(Metric m, const std::vector<float>& stored, std::int64_t n,
                                    const std::vector<std::int64_t>& ids, const std::vector<float>& queries,
                                    std::int64_t nq, std::int64_t dim, int k, const std::vector<Candidate>& got,
                                    const std::string& what) {
  const int kk = static_cast<int>(std::min<std::int64_t>(k, n));
  if (kk > 0) expect_exact(m, stored, n, ids.data(), queries, nq, dim, kk, to_answer(got, m, nq, k, kk), what);
  expect_padding(got, nq, k, kk, what);
}

}  // namespace shardtopk::test
