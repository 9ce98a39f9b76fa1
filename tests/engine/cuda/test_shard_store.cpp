// kernels/shard_store: float32 rows into the storage layout (rounded as an independent host
// rounding says, padding zero, overflow reported at its first flat index), generated rows (the
// host generator's values), cosine normalisation of staged rows (normalize_rows' bits), row
// norms (the float64 sums of the stored values), ids.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "shardtopk/generator.hpp"

namespace shardtopk::test {
namespace {

/// The stored rows [rows, dpad] of a raw storage buffer, as floats.
std::vector<float> decode(const std::vector<std::uint8_t>& raw, Dtype dt) {
  const std::size_t n = raw.size() / dtype_bytes(dt);
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (dt == Dtype::kFloat32) {
      std::memcpy(&out[i], &raw[4 * i], 4);
    } else {
      std::uint16_t h = 0;
      std::memcpy(&h, &raw[2 * i], 2);
      out[i] = dt == Dtype::kBFloat16 ? half::from_bf16(h) : half::from_f16(h);
    }
  }
  return out;
}

/// Checks stored [rows, dpad] against want [rows, dim] (bits) and zero padding.
void expect_stored(const std::vector<float>& stored, const std::vector<float>& want, std::int64_t rows,
                   std::int64_t dim, std::int64_t dpad, const std::string& what) {
  int bad = 0;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < dpad; ++c) {
      const float w = c < dim ? want[r * dim + c] : 0.0f;
      if (bits_of(stored[r * dpad + c]) != bits_of(w) && ++bad <= 5)
        ADD_FAILURE() << what << ": row " << r << " column " << c << ": stored " << stored[r * dpad + c] << ", want "
                      << w << (c >= dim ? " (padding)" : "");
    }
  EXPECT_EQ(bad, 0) << what;
}

// store_rows writes a block of rows at row0 of the shard, each value rounded to nearest even in
// the storage type, and leaves the padding columns zero: widths 1, 7, 8, 33, 100, blocks of 1
// to 1,000 rows, values from 1e-9 (float16 subnormals) to 6e4, halfway cases included.
TEST(ShardStore, StoreRowsRoundsAndPads) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  for (const Dtype dt : {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16})
    for (const std::int64_t dim : {1, 7, 8, 33, 100})
      for (const std::int64_t m : {1, 5, 1000}) {
        const std::string what = std::string(dname(dt)) + " dim " + std::to_string(dim) + " rows " + std::to_string(m);
        std::vector<float> src = random_floats(static_cast<size_t>(m * dim), 60 + dim + m, -6e4f, 6e4f);
        for (size_t i = 0; i < src.size(); i += 3) src[i] *= 1e-13f;  // tiny values
        src[0] = 1.0f + 1.0f / 2048.0f;                                 // float16 halfway: rounds to even (1.0)
        if (src.size() > 1) src[1] = 1.0f + 3.0f / 2048.0f;             // ... and up
        const std::int64_t dpad = cuda_detail::padded_dim(dim, dt), row0 = 3, total = row0 + m + 2;
        DeviceArray<std::uint8_t> shard(static_cast<size_t>(total * dpad) * dtype_bytes(dt), 0x00);
        DeviceArray<float> dsrc(src);
        DeviceArray<unsigned long long> status(std::vector<unsigned long long>{~0ull});
        cuda_detail::store_rows(dsrc.get(), m, dim, dt, shard.get(), dpad, row0, status.get(), nullptr);
        const std::vector<float> stored = decode(shard.download(), dt);
        EXPECT_EQ(status.download()[0], ~0ull) << what << ": no value overflows";
        const std::vector<float> block(stored.begin() + row0 * dpad, stored.begin() + (row0 + m) * dpad);
        expect_stored(block, rounded(dt, src), m, dim, dpad, what);
        for (std::int64_t r : {std::int64_t{0}, row0 - 1, row0 + m, total - 1})
          for (std::int64_t c = 0; c < dpad; ++c)
            ASSERT_EQ(stored[r * dpad + c], 0.0f) << what << ": row " << r << " outside the block was written";
      }
}

// A value that overflows the storage type is reported by its first flat index
// ((row0 + r) · dim + c, the smallest when several overflow); float32 never overflows.
TEST(ShardStore, StoreRowsReportsTheFirstOverflow) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const std::int64_t dim = 9, m = 20, row0 = 100;
  std::vector<float> src = random_floats(static_cast<size_t>(m * dim), 70);
  src[7 * dim + 5] = 70000.0f;  // beyond float16's 65,504
  src[3 * dim + 8] = -1e6f;     // the first one
  src[12 * dim + 0] = std::numeric_limits<float>::max();  // rounds beyond bfloat16's range
  for (const Dtype dt : {Dtype::kFloat16, Dtype::kBFloat16, Dtype::kFloat32}) {
    const std::int64_t dpad = cuda_detail::padded_dim(dim, dt);
    DeviceArray<std::uint8_t> shard(static_cast<size_t>((row0 + m) * dpad) * dtype_bytes(dt), 0x00);
    DeviceArray<float> dsrc(src);
    DeviceArray<unsigned long long> status(std::vector<unsigned long long>{~0ull});
    cuda_detail::store_rows(dsrc.get(), m, dim, dt, shard.get(), dpad, row0, status.get(), nullptr);
    const unsigned long long want = dt == Dtype::kFloat16    ? (row0 + 3) * dim + 8
                                    : dt == Dtype::kBFloat16 ? (row0 + 12) * dim + 0
                                                             : ~0ull;
    EXPECT_EQ(status.download()[0], want) << dname(dt);
  }
}

// Generated rows equal the host generator's values (generated_value), in float32 staging and
// stored directly; the direct store runs in launches of at most 2^28 values (8,193 rows of
// 32,768: two launches), whose boundary rows are checked.
TEST(ShardStore, GeneratedRowsEqualTheHostGenerator) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const std::uint64_t seed = 42;
  const std::int64_t first = 123456;
  {
    const std::int64_t m = 777, dim = 77;
    DeviceArray<float> dst(static_cast<size_t>(m * dim));
    cuda_detail::generate_rows_f32(dst.get(), m, dim, seed, first, nullptr);
    const std::vector<float> got = dst.download();
    std::vector<float> want(got.size());
    generate_rows(seed, first, m, dim, want.data(), 1);
    EXPECT_EQ(got, want);
  }
  for (const Dtype dt : {Dtype::kFloat16, Dtype::kFloat32, Dtype::kBFloat16}) {
    for (const auto& [m, dim] : {std::pair<std::int64_t, std::int64_t>{1000, 33}, {8193, 32768}}) {
      const std::string what = std::string(dname(dt)) + " " + std::to_string(m) + " x " + std::to_string(dim);
      const std::int64_t dpad = cuda_detail::padded_dim(dim, dt);
      DeviceArray<std::uint8_t> shard(static_cast<size_t>(m * dpad) * dtype_bytes(dt), 0x00);
      cuda_detail::generate_store_rows(dt, shard.get(), m, dim, dpad, seed, first, nullptr);
      const std::vector<float> stored = decode(shard.download(), dt);
      for (const std::int64_t r : {std::int64_t{0}, std::int64_t{1}, m / 2, m - 2, m - 1}) {
        std::vector<float> want(static_cast<size_t>(dim));
        generate_rows(seed, first + r, 1, dim, want.data(), 1);
        expect_stored(std::vector<float>(stored.begin() + r * dpad, stored.begin() + (r + 1) * dpad),
                      rounded(dt, want), 1, dim, dpad, what + " row " + std::to_string(r));
      }
    }
  }
}

// Normalisation of staged rows equals normalize_rows() bit for bit; a zero row is reported by
// its global index (first_row + r, the smallest) and left as it is.
TEST(ShardStore, NormalizeRowsEqualsTheHostBitForBit) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  for (const std::int64_t dim : {1, 7, 300, 4099}) {
    const std::int64_t m = 500, first = 1000;
    std::vector<float> x = random_floats(static_cast<size_t>(m * dim), 80 + dim);
    for (std::int64_t d = 0; d < dim; ++d) x[10 * dim + d] *= 1e-19f;
    for (std::int64_t d = 0; d < dim; ++d) x[11 * dim + d] *= 1e19f;
    std::vector<float> want = x;
    normalize_rows(want.data(), m, dim, first, "row");
    DeviceArray<float> dx(x);
    DeviceArray<unsigned long long> status(std::vector<unsigned long long>{~0ull});
    cuda_detail::normalize_rows_f32(dx.get(), m, dim, first, status.get(), nullptr);
    EXPECT_EQ(status.download()[0], ~0ull) << "dim " << dim;
    const std::vector<float> got = dx.download();
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (bits_of(got[i]) != bits_of(want[i]) && ++bad <= 5)
        ADD_FAILURE() << "dim " << dim << " row " << i / dim << " column " << i % dim << ": device " << got[i]
                      << ", normalize_rows " << want[i];
    EXPECT_EQ(bad, 0) << "dim " << dim;
    // zero rows
    std::fill(x.begin() + 300 * dim, x.begin() + 301 * dim, 0.0f);
    std::fill(x.begin() + 40 * dim, x.begin() + 41 * dim, 0.0f);
    dx.upload(x);
    status.upload({~0ull});
    cuda_detail::normalize_rows_f32(dx.get(), m, dim, first, status.get(), nullptr);
    EXPECT_EQ(status.download()[0], static_cast<unsigned long long>(first + 40)) << "dim " << dim;
    const std::vector<float> after = dx.download();
    for (std::int64_t d = 0; d < dim; ++d) ASSERT_EQ(after[40 * dim + d], 0.0f) << "the zero row stays zero";
  }
}

// ‖x‖² of the stored rows: each row's float is the float64 sum rounded (the device adds in
// another order: within one float rounding), and the maximum (as double bits, max-combined
// with what the word held) is the largest row's float64 sum within 1e-12.
TEST(ShardStore, RowNormsAreTheFloat64SumsOfTheStoredValues) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  for (const Dtype dt : {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16})
    for (const std::int64_t dim : {1, 7, 768}) {
      const std::string what = std::string(dname(dt)) + " dim " + std::to_string(dim);
      const std::int64_t n = 3001;
      std::vector<float> rows = random_floats(static_cast<size_t>(n * dim), 90 + dim, -100.0f, 100.0f);
      const DeviceShard shard(rows, n, dim, dt, iota_ids(n));
      const std::vector<float> stored = rounded(dt, rows);
      const std::vector<float> got = shard.row_sq.download();
      double max_sq = 0.0;
      for (std::int64_t r = 0; r < n; ++r) {
        double s = 0.0;
        for (std::int64_t d = 0; d < dim; ++d) s += static_cast<double>(stored[r * dim + d]) * stored[r * dim + d];
        max_sq = std::max(max_sq, s);
        ASSERT_NEAR(got[r], s, s * 1.2e-7) << what << " row " << r;
      }
      EXPECT_NEAR(shard.max_sq, max_sq, max_sq * 1e-12) << what;
      // without row_sq: only the maximum; an earlier larger maximum stays
      DeviceArray<unsigned long long> word(std::vector<unsigned long long>{0ull});
      cuda_detail::row_norms(dt, shard.rows.get(), n, shard.dpad, nullptr, word.get(), nullptr);
      double dev_max = 0.0;
      const unsigned long long bits = word.download()[0];
      std::memcpy(&dev_max, &bits, sizeof dev_max);
      EXPECT_EQ(dev_max, shard.max_sq) << what;
      const double larger = max_sq * 4.0;
      unsigned long long larger_bits = 0;
      std::memcpy(&larger_bits, &larger, sizeof larger);
      word.upload({larger_bits});
      cuda_detail::row_norms(dt, shard.rows.get(), n, shard.dpad, nullptr, word.get(), nullptr);
      EXPECT_EQ(word.download()[0], larger_bits) << what;
    }
}

TEST(ShardStore, FillIdsCountsFromFirst) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{1000}, (std::int64_t{1} << 20) + 3}) {
    DeviceArray<std::int64_t> ids(static_cast<size_t>(n), 0xFF);
    cuda_detail::fill_ids(ids.get(), n, 5000000000LL, nullptr);
    EXPECT_EQ(ids.download(), iota_ids(n, 5000000000LL)) << "n " << n;
  }
}

}  // namespace
}  // namespace shardtopk::test
