// half::first_overflow (src/core/half.hpp): the first column that rounds to infinity in binary16
// or bfloat16, equal to a column-by-column conversion on rows near the largest finite values,
// with the fast pass that skips rows whose magnitudes stay at or below them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/half.hpp"

namespace shardtopk {
namespace {

std::int64_t reference(const std::vector<float>& row, bool bf16) {
  for (std::size_t d = 0; d < row.size(); ++d) {
    const float back = bf16 ? half::from_bf16(half::to_bf16(row[d])) : half::from_f16(half::to_f16(row[d]));
    if (!std::isfinite(back)) return static_cast<std::int64_t>(d);
  }
  return -1;
}

TEST(Half, FirstOverflowAtTheLargestFiniteValuesAndAroundThem) {
  std::vector<float> row(37, 1.0f);
  auto at = [&](float v, std::size_t d, bool bf16) {
    std::vector<float> r = row;
    r[d] = v;
    return half::first_overflow(r.data(), static_cast<std::int64_t>(r.size()), bf16);
  };
  EXPECT_EQ(at(65504.0f, 5, false), -1);
  EXPECT_EQ(at(std::nextafter(65520.0f, 0.0f), 5, false), -1);  // rounds down to 65504
  EXPECT_EQ(at(65520.0f, 5, false), 5);                         // the midpoint rounds to infinity
  EXPECT_EQ(at(-65520.0f, 36, false), 36);
  const float bf_max = half::from_bf16(0x7F7F);
  EXPECT_EQ(at(bf_max, 0, true), -1);
  EXPECT_EQ(at(std::numeric_limits<float>::max(), 0, true), 0);
  EXPECT_EQ(at(std::numeric_limits<float>::infinity(), 9, false), 9);
  EXPECT_EQ(at(std::numeric_limits<float>::quiet_NaN(), 9, true), 9);
  EXPECT_EQ(half::first_overflow(row.data(), 0, false), -1);
}

TEST(Half, FirstOverflowEqualsAConversionOfEveryColumn) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> near(0.999f, 1.001f);
  for (bool bf16 : {false, true}) {
    const float largest = bf16 ? half::from_bf16(0x7F7F) : 65504.0f;
    for (int t = 0; t < 2000; ++t) {
      std::vector<float> row(1 + rng() % 70);
      for (float& v : row) v = (rng() % 2 ? 1.0f : -1.0f) * (rng() % 8 == 0 ? largest * near(rng) : 1.0f);
      ASSERT_EQ(half::first_overflow(row.data(), static_cast<std::int64_t>(row.size()), bf16), reference(row, bf16))
          << (bf16 ? "bfloat16" : "float16") << " case " << t;
    }
  }
}

}  // namespace
}  // namespace shardtopk
