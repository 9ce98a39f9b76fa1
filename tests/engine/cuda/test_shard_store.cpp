// kernels/shard_store: float32 rows into the storage layout (rounded as an independent host
// rounding says, padding zero, overflow reported at its first flat index), the same into a list
// of slots (store_rows' bytes at those slots), generated rows (the host generator's values),
// cosine normalisation of staged rows (normalize_rows' bits), row norms (the float64 sums of the
// stored values; by slot list: row_norms' bits), ids.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
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

/// Distinct scattered slots for m staged rows: 2 + 3r + (r mod 2) (never two consecutive), in
/// slot order or shuffled.
std::vector<std::int64_t> scattered_slots(std::int64_t m, bool shuffled, std::uint64_t seed) {
  std::vector<std::int64_t> slots(static_cast<std::size_t>(m));
  for (std::int64_t r = 0; r < m; ++r) slots[r] = 2 + 3 * r + r % 2;
  if (shuffled) std::shuffle(slots.begin(), slots.end(), std::mt19937_64(seed));
  return slots;
}

// The slot-list store (store_rows_at, row_norms_at, scatter_ids: what write_rows uses) gives the
// bytes of store_rows / row_norms of each row at its slot: the whole shard, row_sq and the
// largest norm's bits equal, rows off the list untouched (shard zero, row_sq and ids keep their
// 0xFF fill). Widths 1, 7, 33, 768 (the norm's lanes loop over dpad), 1 to 1,000 rows, slots in
// order (as write_rows passes them) and shuffled; stored values also checked against an
// independent rounding.
TEST(ShardStore, TheSlotListStoreEqualsStoreRowsAtTheSlots) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  for (const Dtype dt : {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16})
    for (const std::int64_t dim : {1, 7, 33, 768})
      for (const std::int64_t m : {1, 5, 1000})
        for (const bool shuffled : {false, true}) {
          const std::string what = std::string(dname(dt)) + " dim " + std::to_string(dim) + " rows " +
                                   std::to_string(m) + (shuffled ? " shuffled" : " in order");
          SCOPED_TRACE(what);
          std::vector<float> src = random_floats(static_cast<size_t>(m * dim), 110 + dim + m, -6e4f, 6e4f);
          for (size_t i = 0; i < src.size(); i += 3) src[i] *= 1e-13f;  // float16 subnormals
          const std::vector<std::int64_t> slots = scattered_slots(m, shuffled, 120 + m);
          const std::int64_t dpad = cuda_detail::padded_dim(dim, dt), total = 3 * m + 4;
          const std::size_t elem = dtype_bytes(dt), shard_bytes = static_cast<size_t>(total * dpad) * elem;
          const std::vector<std::int64_t> src_ids = iota_ids(m, 7000000000LL);
          DeviceArray<float> dsrc(src);
          DeviceArray<std::int64_t> dslots(slots), dids(src_ids);

          DeviceArray<std::uint8_t> shard(shard_bytes, 0x00), ref(shard_bytes, 0x00);
          DeviceArray<float> row_sq(static_cast<size_t>(total), 0xFF), ref_sq(static_cast<size_t>(total), 0xFF);
          DeviceArray<unsigned long long> status(std::vector<unsigned long long>{~0ull, 0ull});
          DeviceArray<unsigned long long> ref_status(std::vector<unsigned long long>{~0ull, 0ull});
          DeviceArray<std::int64_t> ids(static_cast<size_t>(total), 0xFF);
          cuda_detail::store_rows_at(dsrc.get(), m, dim, dt, shard.get(), dpad, dslots.get(), status.get(), nullptr);
          cuda_detail::row_norms_at(dt, shard.get(), m, dpad, dslots.get(), row_sq.get(), status.get() + 1, nullptr);
          cuda_detail::scatter_ids(dids.get(), m, dslots.get(), ids.get(), nullptr);
          for (std::int64_t r = 0; r < m; ++r) {
            const std::int64_t s = slots[r];
            cuda_detail::store_rows(dsrc.get() + r * dim, 1, dim, dt, ref.get(), dpad, s, ref_status.get(), nullptr);
            cuda_detail::row_norms(dt, ref.get() + static_cast<size_t>(s * dpad) * elem, 1, dpad, ref_sq.get() + s,
                                   ref_status.get() + 1, nullptr);
          }

          const std::vector<std::uint8_t> got_raw = shard.download(), ref_raw = ref.download();
          const std::size_t row_bytes = static_cast<size_t>(dpad) * elem;
          for (std::int64_t row = 0; row < total; ++row)
            ASSERT_EQ(std::memcmp(got_raw.data() + row * row_bytes, ref_raw.data() + row * row_bytes, row_bytes), 0)
                << "shard row " << row << " differs from store_rows'";
          const std::vector<float> got_sq = row_sq.download(), want_sq = ref_sq.download();
          for (std::int64_t row = 0; row < total; ++row)
            ASSERT_EQ(bits_of(got_sq[row]), bits_of(want_sq[row])) << "row_sq of row " << row;
          const std::vector<unsigned long long> st = status.download(), ref_st = ref_status.download();
          EXPECT_EQ(st[0], ~0ull) << "no value overflows";
          EXPECT_EQ(ref_st[0], ~0ull);
          EXPECT_EQ(st[1], ref_st[1]) << "the largest norm's bits";

          const std::vector<float> stored = decode(got_raw, dt);
          const std::vector<float> want = rounded(dt, src);
          std::vector<float> at_slots, want_in_order;
          for (std::int64_t r = 0; r < m; ++r) {
            at_slots.insert(at_slots.end(), stored.begin() + slots[r] * dpad, stored.begin() + (slots[r] + 1) * dpad);
            want_in_order.insert(want_in_order.end(), want.begin() + r * dim, want.begin() + (r + 1) * dim);
          }
          expect_stored(at_slots, want_in_order, m, dim, dpad, what);

          std::vector<std::int64_t> want_ids(static_cast<size_t>(total), -1);  // the 0xFF fill
          for (std::int64_t r = 0; r < m; ++r) want_ids[slots[r]] = src_ids[r];
          EXPECT_EQ(ids.download(), want_ids);
        }
  // An empty list launches nothing (a zero grid would be a launch error).
  cuda_detail::store_rows_at(nullptr, 0, 8, Dtype::kFloat16, nullptr, 8, nullptr, nullptr, nullptr);
  cuda_detail::row_norms_at(Dtype::kFloat16, nullptr, 0, 8, nullptr, nullptr, nullptr, nullptr);
  cuda_detail::scatter_ids(nullptr, 0, nullptr, nullptr, nullptr);
  CHECK_CUDA(cudaDeviceSynchronize());
}

// The slot-list store reports an overflow as store_rows does at the same position: the smallest
// slots[r] · dim + c of a value that is not finite in the storage type, which with shuffled
// slots is not the first overflowing staged row (here row 12 of 20, slot 100); float32 never
// overflows.
TEST(ShardStore, TheSlotListStoreReportsTheFirstOverflowBySlot) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const std::int64_t dim = 9, m = 20;
  std::vector<float> src = random_floats(static_cast<size_t>(m * dim), 130);
  src[7 * dim + 5] = 70000.0f;                            // beyond float16's 65,504
  src[3 * dim + 8] = -1e6f;                               // beyond float16's range too
  src[12 * dim + 0] = std::numeric_limits<float>::max();  // beyond float16's and bfloat16's
  for (const bool shuffled : {false, true}) {
    std::vector<std::int64_t> slots(static_cast<size_t>(m));
    for (std::int64_t r = 0; r < m; ++r) slots[r] = 100 + 5 * (shuffled ? (r * 7 + 16) % m : r);  // row 12 → 100
    auto at = [&](std::int64_t r, std::int64_t c) { return static_cast<unsigned long long>(slots[r] * dim + c); };
    for (const Dtype dt : {Dtype::kFloat16, Dtype::kBFloat16, Dtype::kFloat32}) {
      const std::int64_t dpad = cuda_detail::padded_dim(dim, dt);
      const std::size_t bytes = static_cast<size_t>((100 + 5 * m) * dpad) * dtype_bytes(dt);
      DeviceArray<std::uint8_t> shard(bytes, 0x00), ref(bytes, 0x00);
      DeviceArray<float> dsrc(src);
      DeviceArray<std::int64_t> dslots(slots);
      DeviceArray<unsigned long long> status(std::vector<unsigned long long>{~0ull});
      DeviceArray<unsigned long long> ref_status(std::vector<unsigned long long>{~0ull});
      cuda_detail::store_rows_at(dsrc.get(), m, dim, dt, shard.get(), dpad, dslots.get(), status.get(), nullptr);
      for (std::int64_t r = 0; r < m; ++r)
        cuda_detail::store_rows(dsrc.get() + r * dim, 1, dim, dt, ref.get(), dpad, slots[r], ref_status.get(), nullptr);
      const unsigned long long want = dt == Dtype::kFloat16    ? std::min({at(7, 5), at(3, 8), at(12, 0)})
                                      : dt == Dtype::kBFloat16 ? at(12, 0)
                                                               : ~0ull;
      const std::string what = std::string(dname(dt)) + (shuffled ? " shuffled" : " in order");
      EXPECT_EQ(status.download()[0], want) << what;
      EXPECT_EQ(ref_status.download()[0], want) << what << " (store_rows at the slots)";
      EXPECT_EQ(shard.download(), ref.download()) << what << ": the stored bytes, overflowed values included";
    }
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
