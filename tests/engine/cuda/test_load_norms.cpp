// kernels/load_norms: the largest float64 row norm of staged rows (float32 values and binary16
// bit patterns), launches accumulating into the parts, against the host's row_norm bit for bit;
// equal norms in different blocks and launches: the smallest row.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "cuda_test_support.hpp"
#include "engine/cuda/kernels/load_norms.hpp"
#include "index/admission.hpp"

namespace shardtopk::test {
namespace {

using cuda_detail::kLoadNormBlocks;
using cuda_detail::RowNormPart;

/// The parts combined as the CUDA engine combines them: the larger norm, then the smaller row.
RowNormPart combined(const std::vector<RowNormPart>& parts) {
  RowNormPart best{0.0, -1};
  for (const RowNormPart& p : parts)
    if (p.row >= 0 && (best.row < 0 || p.norm > best.norm || (p.norm == best.norm && p.row < best.row))) best = p;
  return best;
}

/// Rows [m, dim] as float32 values and as binary16 patterns, with the largest row copied to
/// `ties` (which all precede it) so that the first of them must win.
struct Rows {
  std::vector<float> f32;
  std::vector<std::uint16_t> bits;
};
Rows make_rows(std::int64_t m, std::int64_t dim, unsigned seed, const std::vector<std::int64_t>& ties,
               std::int64_t top) {
  std::mt19937_64 rng(seed);
  Rows r;
  r.bits.resize(static_cast<std::size_t>(m * dim));
  for (auto& h : r.bits) {
    do h = static_cast<std::uint16_t>(rng());
    while ((h & 0x7C00u) == 0x7C00u);  // finite patterns only: subnormals, ±0, ±65504 included
  }
  for (std::int64_t d = 0; d < dim; ++d) r.bits[top * dim + d] = 0x7BFF;  // 65504: the largest row
  for (std::int64_t t : ties) std::copy_n(r.bits.begin() + top * dim, dim, r.bits.begin() + t * dim);
  r.f32.resize(r.bits.size());
  for (std::size_t i = 0; i < r.bits.size(); ++i) r.f32[i] = half::from_f16(r.bits[i]);
  return r;
}

TEST(LoadNorms, LargestNormIsTheHostsBitForBitAndTiesGoToTheFirstRow) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  for (const std::int64_t dim : {1, 3, 4, 7, 768, 770})
    for (const std::int64_t m : {1, 5, 700, 3001}) {
      // launches of uneven sizes, as staged chunks: rows [0, a), [a, b), [b, m)
      const std::int64_t a = m / 3, b = m - m / 5;
      std::vector<std::int64_t> ties;
      if (m > 300) ties = {m / 2, 280, b + 1};  // other blocks, other launches
      const std::int64_t top = m - 1;
      const Rows r = make_rows(m, dim, static_cast<unsigned>(77 + dim * 31 + m), ties, top);
      for (const RowFormat fmt : {RowFormat::kFloat32, RowFormat::kFloat16Bits}) {
        const std::string what = std::string(fmt == RowFormat::kFloat32 ? "float32" : "bits") + " dim " +
                                 std::to_string(dim) + " rows " + std::to_string(m);
        DeviceArray<float> f(r.f32);
        DeviceArray<std::uint16_t> h(r.bits);
        DeviceArray<RowNormPart> parts(kLoadNormBlocks, 0xFF);
        for (const auto& [lo, hi] : {std::pair{std::int64_t{0}, a}, std::pair{a, b}, std::pair{b, m}}) {
          const void* p = fmt == RowFormat::kFloat32 ? static_cast<const void*>(f.get() + lo * dim)
                                                     : static_cast<const void*>(h.get() + lo * dim);
          cuda_detail::staged_norm_max(p, fmt, hi - lo, dim, lo, parts.get(), nullptr);
        }
        const RowNormPart got = combined(parts.download());
        // the float64 oracle: each row's norm on the host, the first largest
        std::int64_t want_row = 0;
        double want = row_norm(r.f32.data(), dim);
        for (std::int64_t i = 1; i < m; ++i) {
          const double n = row_norm(r.f32.data() + i * dim, dim);
          if (n > want) {
            want = n;
            want_row = i;
          }
        }
        EXPECT_EQ(got.row, want_row) << what;
        EXPECT_EQ(std::memcmp(&got.norm, &want, sizeof want), 0) << what << ": " << got.norm << " vs " << want;
      }
    }
}

// Every row's norm, one row per launch into its own parts: each the host's bits (rows of random
// values whose sums depend on the order of the additions).
TEST(LoadNorms, EachRowsNormIsTheHosts) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  for (const std::int64_t dim : {5, 768}) {
    std::vector<float> v = random_floats(static_cast<std::size_t>(64 * dim), 91);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] *= (i % 7 == 0) ? 1e6f : 1e-3f;  // wide magnitudes
    DeviceArray<float> f(v);
    int bad = 0;
    for (std::int64_t i = 0; i < 64; ++i) {
      DeviceArray<RowNormPart> parts(kLoadNormBlocks, 0xFF);
      cuda_detail::staged_norm_max(f.get() + i * dim, RowFormat::kFloat32, 1, dim, i, parts.get(), nullptr);
      const RowNormPart got = combined(parts.download());
      const double want = row_norm(v.data() + i * dim, dim);
      if ((got.row != i || std::memcmp(&got.norm, &want, sizeof want) != 0) && ++bad <= 5)
        ADD_FAILURE() << "dim " << dim << " row " << i << ": " << got.norm << " (row " << got.row << ") vs " << want;
    }
    EXPECT_EQ(bad, 0);
  }
}

}  // namespace
}  // namespace shardtopk::test
