// A generated shard (ShardInput::generated) in the CPU engine gives exactly what the same rows
// given explicitly give: ids first_row + i, cosine rows normalised with normalize_rows, every
// storage dtype. And generate_rows() is generated_value() whatever the thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine_runner.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/generator.hpp"

namespace shardtopk {
namespace {

TEST(GenerateRows, MatchesGeneratedValueForAnyThreadCount) {
  const std::int64_t rows = 3001, dim = 45, first = 123456789;
  std::vector<float> a(rows * dim), b(rows * dim);
  generate_rows(7, first, rows, dim, a.data(), 1);
  generate_rows(7, first, rows, dim, b.data(), 3);
  ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  for (std::int64_t r : {std::int64_t{0}, std::int64_t{1}, rows - 1})
    for (std::int64_t j : {std::int64_t{0}, dim - 1}) EXPECT_EQ(a[r * dim + j], generated_value(7, first + r, j));
  // values are multiples of 2^-15 below 4 in magnitude, not all equal
  double sum2 = 0;
  for (float v : a) {
    EXPECT_LT(std::abs(v), 4.0f);
    EXPECT_EQ(v * 32768.0f, std::nearbyint(v * 32768.0f));
    sum2 += double(v) * v;
  }
  EXPECT_NEAR(sum2 / a.size(), 4.0 / 3.0, 0.05);  // variance of the Irwin-Hall sum
}

struct GenCase {
  Metric metric;
  Dtype dtype;
};
std::ostream& operator<<(std::ostream& os, const GenCase& c) {
  return os << to_string(c.metric) << " " << to_string(c.dtype);
}
class GeneratedShard : public ::testing::TestWithParam<GenCase> {};

TEST_P(GeneratedShard, EqualsExplicitRows) {
  const auto c = GetParam();
  // 16384-row blocks inside the engine: 20000 rows cross a block edge; odd D, odd row count.
  const std::int64_t rows = 20001, dim = 37, first = 5000;
  const std::uint64_t seed = 42;
  const int k = 17, batch = 5;
  EngineLimits lim{batch, 64};

  ShardInput gen;
  gen.rows = rows;
  gen.dim = dim;
  gen.generated = true;
  gen.seed = seed;
  gen.first_row = first;
  auto eg = make_cpu_engine(gen, c.metric, c.dtype, lim, EngineOptions{2});

  std::vector<float> data(rows * dim);
  generate_rows(seed, first, rows, dim, data.data(), 2);
  if (c.metric == Metric::kCosine) normalize_rows(data.data(), rows, dim, first, "row");
  std::vector<std::int64_t> ids(rows);
  for (std::int64_t i = 0; i < rows; ++i) ids[i] = first + i;
  ShardInput ex{data.data(), rows, dim, ids.data()};
  auto ee = make_cpu_engine(ex, c.metric, c.dtype, lim, EngineOptions{2});
  EXPECT_EQ(eg->info().resident_bytes, ee->info().resident_bytes);

  std::vector<float> q(batch * dim);
  generate_rows(seed + 1, 0, batch, dim, q.data(), 1);
  const std::vector<Candidate> got_g = test::EngineRunner(*eg).search(q.data(), batch, k);
  const std::vector<Candidate> got_e = test::EngineRunner(*ee).search(q.data(), batch, k);
  for (int i = 0; i < batch * k; ++i) {
    const Candidate a = got_g[i], b = got_e[i];
    ASSERT_EQ(a.id, b.id) << "position " << i;
    ASSERT_EQ(0, std::memcmp(&a.score, &b.score, sizeof(float))) << "position " << i;
    ASSERT_GE(a.id, first);
    ASSERT_LT(a.id, first + rows);
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, GeneratedShard,
                         ::testing::Values(GenCase{Metric::kInnerProduct, Dtype::kFloat32},
                                           GenCase{Metric::kCosine, Dtype::kFloat32},
                                           GenCase{Metric::kL2, Dtype::kFloat32},
                                           GenCase{Metric::kInnerProduct, Dtype::kFloat16},
                                           GenCase{Metric::kCosine, Dtype::kBFloat16},
                                           GenCase{Metric::kL2, Dtype::kFloat16}));

TEST(GeneratedShard, NoDataAndNotGeneratedIsRefused) {
  ShardInput s;
  s.rows = 10;
  s.dim = 4;
  EXPECT_THROW(make_cpu_engine(s, Metric::kInnerProduct, Dtype::kFloat32, EngineLimits{}, EngineOptions{1}), Error);
}

}  // namespace
}  // namespace shardtopk
