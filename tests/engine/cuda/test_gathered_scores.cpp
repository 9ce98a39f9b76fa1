// kernels/gathered_scores against the float64 oracle: every output cell Σ_d q_d · x_d of the
// stored (rounded) query and row values is within the batched GEMM's bound (docs/EXACTNESS.md,
// "The bound Δ": float32 accumulation with γ_mma = (D_pad + 2)·2⁻²² of Σ_d |q_d x_d|, plus one
// rounding to float16 for float16 shards); repeated rows (and equal rows) give bit-identical
// cells; exact-arithmetic inputs give the correctly rounded exact sum; cells past count in each
// query's run and past the output are untouched; bad arguments throw and queue nothing.

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "cuda_test_support.hpp"
#include "engine/cuda/kernels/gathered_scores.hpp"

namespace shardtopk::test {
namespace {

using cuda_detail::GatheredScores;

constexpr int kMaxN = 100;        // queries of the largest case
constexpr int kShardRows = 1200;  // shard rows the gathered lists draw from
constexpr int kTieClasses = 37;   // kTies: row r holds the values of row r % 37
constexpr std::size_t kGuard = 64;  // output cells past [n, ld] that must stay untouched

/// The values a case is built from.
enum class Values {
  kNormal,  // rows and queries N(0, 1)
  kLarge,   // queries up to 32,000 (the engine's scaled queries: max |q_d| in [2¹⁴, 2¹⁵)), rows
            // N(0, 1)·2⁻¹⁰ clipped to ±2⁻⁹, subnormal float16 values included: products up to 2⁶,
            // sums below the float16 range whatever the signs
  kTies,    // small integers in [-2, 2], 37 distinct rows: exact float32 sums, many equal cells
};

const char* values_name(Values v) { return v == Values::kNormal ? "normal" : v == Values::kLarge ? "large" : "ties"; }

struct Param {
  Dtype dtype;
  int dim;
  Values values;
};

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const Param& p = info.param;
  return std::string(dname(p.dtype)) + "_d" + std::to_string(p.dim) + "_" + values_name(p.values);
}

std::uint16_t to_bits(Dtype dt, float x) { return dt == Dtype::kFloat16 ? half::to_f16(x) : half::to_bf16(x); }
double from_bits(Dtype dt, std::uint16_t h) {
  return static_cast<double>(dt == Dtype::kFloat16 ? half::from_f16(h) : half::from_bf16(h));
}

/// Host values for `count` entries of a case's rows or queries.
std::vector<float> make_values(Values v, bool query, std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> out(count);
  if (v == Values::kTies) {
    std::uniform_int_distribution<int> dist(-2, 2);
    for (auto& x : out) x = static_cast<float>(dist(rng));
  } else if (v == Values::kLarge && query) {
    std::uniform_real_distribution<float> dist(-32000.0f, 32000.0f);
    for (auto& x : out) x = dist(rng);
  } else {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const float scale = v == Values::kLarge ? std::ldexp(1.0f, -10) : 1.0f;
    const float clip = v == Values::kLarge ? std::ldexp(1.0f, -9) : 1e30f;
    for (auto& x : out) x = std::clamp(dist(rng) * scale, -clip, clip);
  }
  return out;
}

/// One shard and kMaxN queries on the device, their stored values on the host, and the float64
/// oracle's dot products and Σ|q_d x_d| of every (query, shard row).
class GatheredRig {
 public:
  explicit GatheredRig(const Param& p)
      : p_(p),
        host_rows_(rows_for(p)),
        shard_(host_rows_, kShardRows, p.dim, p.dtype, shuffled_ids(kShardRows, 17 + p.dim)),
        dpad_(shard_.dpad) {
    // The shard as stored (the device's own rounding), decoded on the host.
    std::vector<std::uint16_t> xb(static_cast<std::size_t>(kShardRows * dpad_));
    CHECK_CUDA(cudaMemcpy(xb.data(), shard_.rows.get(), xb.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<double> x(xb.size());
    for (std::size_t i = 0; i < xb.size(); ++i) x[i] = from_bits(p.dtype, xb[i]);
    // Queries [kMaxN, dpad] in the storage type, zero-padded, rounded on the host.
    const std::vector<float> qf = make_values(p.values, true, static_cast<std::size_t>(kMaxN) * p.dim, 29 + p.dim);
    std::vector<std::uint16_t> qb(static_cast<std::size_t>(kMaxN * dpad_), 0);
    std::vector<double> q(qb.size(), 0.0);
    for (int j = 0; j < kMaxN; ++j)
      for (int d = 0; d < p.dim; ++d) {
        const std::size_t at = static_cast<std::size_t>(j * dpad_ + d);
        qb[at] = to_bits(p.dtype, qf[static_cast<std::size_t>(j) * p.dim + d]);
        q[at] = from_bits(p.dtype, qb[at]);
      }
    queries_ = DeviceArray<std::uint16_t>(qb);
    exact_.resize(static_cast<std::size_t>(kMaxN) * kShardRows);
    absum_.resize(exact_.size());
    for (int j = 0; j < kMaxN; ++j)
      for (int r = 0; r < kShardRows; ++r) {
        double s = 0.0, a = 0.0;
        const double* qj = q.data() + static_cast<std::size_t>(j) * dpad_;
        const double* xr = x.data() + static_cast<std::size_t>(r) * dpad_;
        for (std::int64_t d = 0; d < dpad_; ++d) {
          const double prod = qj[d] * xr[d];  // exact: two 11- (8-) bit significands
          s += prod;
          a += std::fabs(prod);
        }
        exact_[static_cast<std::size_t>(j) * kShardRows + r] = s;
        absum_[static_cast<std::size_t>(j) * kShardRows + r] = a;
      }
  }

  /// Scores `count` gathered rows against the first n queries with leading dimension ld and
  /// checks every cell of the output (and kGuard cells past it).
  void check(int n, int count, std::int64_t ld, std::uint64_t seed) {
    const std::string what = std::string(dname(p_.dtype)) + " dim " + std::to_string(p_.dim) + " " +
                             values_name(p_.values) + " n " + std::to_string(n) + " count " +
                             std::to_string(count) + " ld " + std::to_string(ld);
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> pick(0, kShardRows - 1);
    std::vector<std::int32_t> rows(static_cast<std::size_t>(count));
    for (auto& r : rows) r = pick(rng);
    if (count > 1) rows[static_cast<std::size_t>(count) - 1] = rows[0];  // a repeat in another tile
    if (count > 130) rows[129] = rows[1];                                // ... and another block
    DeviceArray<std::int32_t> drows(rows);

    const bool f16 = p_.dtype == Dtype::kFloat16;
    const std::size_t esz = f16 ? 2 : 4;
    const std::size_t cells = static_cast<std::size_t>(n) * static_cast<std::size_t>(ld) + kGuard;
    DeviceArray<std::uint8_t> out(cells * esz, 0xFF);
    GatheredScores a;
    a.shard = shard_.rows.get();
    a.dpad = dpad_;
    a.rows = drows.get();
    a.count = count;
    a.queries = queries_.get();
    a.n = n;
    a.out = out.get();
    a.ld = ld;
    cuda_detail::gathered_scores(p_.dtype, a, nullptr);
    const std::vector<std::uint8_t> raw = out.download();

    auto cell_bits = [&](std::size_t c) {
      std::uint32_t u = 0;
      std::memcpy(&u, raw.data() + c * esz, esz);
      return u;
    };
    const std::uint32_t sentinel = f16 ? 0xFFFFu : 0xFFFFFFFFu;
    const double gamma = static_cast<double>(dpad_ + 2) * std::ldexp(1.0, -22);
    int bad = 0;
    auto fail = [&](const std::string& msg) {
      if (++bad <= 8) ADD_FAILURE() << what << ": " << msg;
    };
    for (int j = 0; j < n; ++j) {
      // the first cell of each row (ties: of each row content) of this query
      std::vector<std::int64_t> first(kShardRows, -1);
      for (std::int64_t i = 0; i < ld; ++i) {
        const std::size_t c = static_cast<std::size_t>(j) * static_cast<std::size_t>(ld) + static_cast<std::size_t>(i);
        const std::uint32_t u = cell_bits(c);
        if (i >= count) {
          if (u != sentinel) fail("padding cell " + std::to_string(i) + " of query " + std::to_string(j) + " written");
          continue;
        }
        const int r = rows[static_cast<std::size_t>(i)];
        const double got = f16 ? static_cast<double>(half::from_f16(static_cast<std::uint16_t>(u)))
                               : static_cast<double>(half::from_bits(u));
        const double exact = exact_[static_cast<std::size_t>(j) * kShardRows + r];
        const double absum = absum_[static_cast<std::size_t>(j) * kShardRows + r];
        const double err32 = gamma * absum;
        const double bound = f16 ? err32 * (1.0 + std::ldexp(1.0, -11)) + std::ldexp(1.0, -11) * std::fabs(exact) +
                                       std::ldexp(1.0, -24)
                                 : err32 + std::ldexp(1.0, -24);
        if (!(std::fabs(got - exact) <= bound)) {
          std::ostringstream os;
          os.precision(17);
          os << "query " << j << " cell " << i << " (row " << r << "): got " << got << ", exact " << exact
             << ", |error| " << std::fabs(got - exact) << " > bound " << bound;
          fail(os.str());
        }
        if (p_.values == Values::kTies) {
          // integer sums below 2^24: the float32 sum is exact, then rounded once to the output
          const std::uint32_t want = f16 ? half::to_f16(static_cast<float>(exact)) : half::bits(static_cast<float>(exact));
          if (u != want && !(exact == 0.0 && (u & (f16 ? 0x7FFFu : 0x7FFFFFFFu)) == 0)) {  // ±0 for 0
            std::ostringstream os;
            os << "query " << j << " cell " << i << ": bits " << std::hex << u << ", the rounded exact sum " << want;
            fail(os.str());
          }
        }
        const int cls = p_.values == Values::kTies ? r % kTieClasses : r;
        std::int64_t& f = first[static_cast<std::size_t>(cls)];
        if (f < 0) {
          f = i;
        } else {
          const std::uint32_t uf = cell_bits(static_cast<std::size_t>(j) * static_cast<std::size_t>(ld) +
                                             static_cast<std::size_t>(f));
          if (uf != u)
            fail("query " + std::to_string(j) + ": cells " + std::to_string(f) + " and " + std::to_string(i) +
                 " hold equal rows but differ");
        }
      }
    }
    for (std::size_t c = static_cast<std::size_t>(n) * static_cast<std::size_t>(ld); c < cells; ++c)
      if (cell_bits(c) != sentinel) fail("cell " + std::to_string(c) + " past the output written");
    EXPECT_EQ(bad, 0) << what << ": " << bad << " wrong cells";
  }

 private:
  static std::vector<float> rows_for(const Param& p) {
    std::vector<float> v = make_values(p.values, false, static_cast<std::size_t>(kShardRows) * p.dim, 11 + p.dim);
    if (p.values == Values::kTies)
      for (int r = kTieClasses; r < kShardRows; ++r)
        std::copy_n(v.begin() + static_cast<std::ptrdiff_t>(r % kTieClasses) * p.dim, p.dim,
                    v.begin() + static_cast<std::ptrdiff_t>(r) * p.dim);
    return v;
  }

  Param p_;
  std::vector<float> host_rows_;
  DeviceShard shard_;
  std::int64_t dpad_;
  DeviceArray<std::uint16_t> queries_;
  std::vector<double> exact_, absum_;  // [kMaxN, kShardRows]
};

class GatheredScoresCase : public ::testing::TestWithParam<Param> {};

// n: one query, a partial n8 tile, one full group of 32, a group and one, four groups (the last
// partial). count: one row, a block of 128 less one, exactly one block, several blocks with a
// partial one. ld: count, and count + 5 (padding cells that must stay untouched).
TEST_P(GatheredScoresCase, EveryCellWithinTheBoundOfTheFloat64Oracle) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  GatheredRig s(GetParam());
  std::uint64_t seed = 1000;
  for (const int n : {1, 7, 32, 33, 100})
    for (const int count : {1, 127, 128, 1000})
      for (const int pad : {0, 5}) s.check(n, count, count + pad, ++seed);
}

std::vector<Param> cases() {
  std::vector<Param> v;
  for (const Dtype dt : {Dtype::kFloat16, Dtype::kBFloat16}) {
    // dim 8: one chunk of 8 (most of the first 32-k block is zero); 24: a partial 32-k block;
    // 100 (dpad 104): four 32-k blocks, the last partial; 136: five (a pair and a lone block
    // after two pairs); 768: 24; 1536: the longest rows taken (48 blocks, 96 KiB of queries)
    for (const int dim : {8, 24, 100, 136, 768, 1536}) v.push_back({dt, dim, Values::kNormal});
    for (const int dim : {100, 768}) v.push_back({dt, dim, Values::kLarge});
    for (const int dim : {8, 768}) v.push_back({dt, dim, Values::kTies});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Gpu, GatheredScoresCase, ::testing::ValuesIn(cases()), param_name);

// Unsupported dtype, count 0, dpad not a multiple of 8 or too long, ld < count: Error naming the value, and
// nothing queued (the output keeps its sentinel bytes).
TEST(GatheredScores, BadArgumentsThrowAndQueueNothing) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  EXPECT_TRUE(cuda_detail::gathered_scores_supported(Dtype::kFloat16));
  EXPECT_TRUE(cuda_detail::gathered_scores_supported(Dtype::kBFloat16));
  EXPECT_FALSE(cuda_detail::gathered_scores_supported(Dtype::kFloat32));
  EXPECT_TRUE(cuda_detail::gathered_scores_supported(Dtype::kFloat16, cuda_detail::kGatheredMaxDpad));
  EXPECT_FALSE(cuda_detail::gathered_scores_supported(Dtype::kFloat16, cuda_detail::kGatheredMaxDpad + 8));
  EXPECT_FALSE(cuda_detail::gathered_scores_supported(Dtype::kBFloat16, 12));
  DeviceArray<std::uint16_t> shard(static_cast<std::size_t>(16 * 16), 0);
  DeviceArray<std::uint16_t> queries(static_cast<std::size_t>(4 * 16), 0);
  DeviceArray<std::int32_t> rows(std::vector<std::int32_t>{0, 3, 3, 15});
  DeviceArray<std::uint8_t> out(static_cast<std::size_t>(4 * 8 * 4), 0xFF);
  auto base = [&] {
    GatheredScores a;
    a.shard = shard.get();
    a.dpad = 16;
    a.rows = rows.get();
    a.count = 4;
    a.queries = queries.get();
    a.n = 4;
    a.out = out.get();
    a.ld = 8;
    return a;
  };
  auto err = [&](Dtype dt, const GatheredScores& a) {
    try {
      cuda_detail::gathered_scores(dt, a, nullptr);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no exception>");
  };
  {
    const std::string m = err(Dtype::kFloat32, base());
    EXPECT_NE(m.find("float32"), std::string::npos) << m;
  }
  {
    GatheredScores a = base();
    a.count = 0;
    const std::string m = err(Dtype::kFloat16, a);
    EXPECT_NE(m.find("count must be in 1 .. "), std::string::npos) << m;
    EXPECT_NE(m.find("(got 0)"), std::string::npos) << m;
  }
  {
    GatheredScores a = base();
    a.dpad = 12;
    const std::string m = err(Dtype::kBFloat16, a);
    EXPECT_NE(m.find("dpad"), std::string::npos) << m;
    EXPECT_NE(m.find("(got 12)"), std::string::npos) << m;
    a.dpad = cuda_detail::kGatheredMaxDpad + 8;
    const std::string m2 = err(Dtype::kFloat16, a);
    EXPECT_NE(m2.find("(got " + std::to_string(a.dpad) + ")"), std::string::npos) << m2;
  }
  {
    GatheredScores a = base();
    a.ld = 3;
    const std::string m = err(Dtype::kFloat16, a);
    EXPECT_NE(m.find("ld must be >= count = 4 (got 3)"), std::string::npos) << m;
  }
  {
    GatheredScores a = base();
    a.n = 0;
    const std::string m = err(Dtype::kFloat16, a);
    EXPECT_NE(m.find("(got 0)"), std::string::npos) << m;
  }
  for (const std::uint8_t b : out.download()) ASSERT_EQ(b, 0xFF) << "a refused call wrote its output";
}

}  // namespace
}  // namespace shardtopk::test
