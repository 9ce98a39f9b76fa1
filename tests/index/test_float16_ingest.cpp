// A float16 corpus streamed as its IEEE binary16 bits (ShardInput::stream_format kFloat16Bits,
// chosen by stream_format()): the host's row norms (src/index/admission.hpp) and base identity
// (shardtopk/storage.hpp) from the bits equal, bit for bit, those of the same values as float32;
// the CPU engine stores the same rows from either stream and refuses a pattern that is not
// finite by row id, value and column; and which loads take the bits.
//
// Values: every special binary16 class that is finite (±0, the smallest and largest subnormals,
// the smallest normal, ±65504) among random finite patterns. Dimensions around row_norm's four
// partial sums and F16C's 8-lane chunks (1, 3, 4, 7, 8, 9, 17, 33) and a real one (768). Both
// conversions (F16C where the CPU has it, and the portable one: io.f16c) and several threads.
// The float32 reference goes through half::from_f16 (core/half.hpp), not the reader's converter.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "index/admission.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/ingest.hpp"
#include "shardtopk/storage.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

/// Finite binary16 patterns: the special values first (in turn, so each row gets some), then
/// random patterns with an exponent below all-ones.
std::vector<std::uint16_t> finite_bits(std::size_t n, std::uint64_t seed) {
  static const std::uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x7BFF, 0xFBFF,
                                           0x3C00, 0xBC00, 0x0200};
  std::mt19937_64 rng(seed);
  std::vector<std::uint16_t> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint16_t h;
    do h = static_cast<std::uint16_t>(rng());
    while ((h & 0x7C00u) == 0x7C00u);
    v[i] = (rng() % 4 == 0) ? specials[rng() % (sizeof specials / sizeof specials[0])] : h;
  }
  for (std::size_t i = 0; i < n && i < sizeof specials / sizeof specials[0]; ++i) v[i * 7 % n] = specials[i];
  return v;
}

std::vector<float> as_float32(const std::vector<std::uint16_t>& bits) {
  std::vector<float> f(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) f[i] = half::from_f16(bits[i]);
  return f;
}

std::uint64_t bits_of(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

const std::int64_t kDims[] = {1, 3, 4, 7, 8, 9, 17, 33, 768};

TEST(Float16Ingest, NormsFromBitsEqualNormsFromFloat32) {
  const std::int64_t n = 41;
  for (const std::int64_t dim : kDims) {
    const std::vector<std::uint16_t> bits = finite_bits(static_cast<std::size_t>(n * dim), 17 + dim);
    const std::vector<float> f32 = as_float32(bits);
    for (const bool f16c : {true, false}) {
      const std::string what = "dim " + std::to_string(dim) + (f16c ? " f16c" : " portable");
      for (std::int64_t i = 0; i < n; ++i) {  // every row's norm (a shard of one row)
        const NormSummary a = shard_norms(f32.data() + i * dim, 1, dim, 500 + i);
        const NormSummary b = shard_norms(bits.data() + i * dim, RowFormat::kFloat16Bits, 1, dim, 500 + i, 1, f16c);
        ASSERT_EQ(bits_of(a.max_norm), bits_of(b.max_norm)) << what << " row " << i;
        ASSERT_EQ(a.row, b.row) << what;
      }
      for (const int threads : {1, 3}) {  // the whole block: the same largest row
        const NormSummary a = shard_norms(f32.data(), n, dim, 1000, threads);
        const NormSummary b = shard_norms(bits.data(), RowFormat::kFloat16Bits, n, dim, 1000, threads, f16c);
        EXPECT_EQ(bits_of(a.max_norm), bits_of(b.max_norm)) << what;
        EXPECT_EQ(a.row, b.row) << what;
      }
    }
  }
  // The largest finite value in every column: 65504² · dim, far inside float64.
  const std::vector<std::uint16_t> big(768, 0x7BFF);
  const NormSummary s = shard_norms(big.data(), RowFormat::kFloat16Bits, 1, 768, 9);
  EXPECT_EQ(s.max_norm, shard_norms(as_float32(big).data(), 1, 768, 9).max_norm);
  EXPECT_DOUBLE_EQ(s.max_norm, 65504.0 * std::sqrt(768.0));
}

TEST(Float16Ingest, BaseIdentityFromBitsEqualsIdentityFromFloat32) {
  const std::int64_t n = 37;
  for (const std::int64_t dim : kDims) {
    const std::vector<std::uint16_t> bits = finite_bits(static_cast<std::size_t>(n * dim), 91 + dim);
    const std::vector<float> f32 = as_float32(bits);
    std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) ids[i] = 7 * (n - i) + 3;
    const std::int64_t* const id_lists[] = {nullptr, ids.data()};
    for (const bool f16c : {true, false})
      for (const int threads : {1, 4})
        for (const std::int64_t* id : id_lists) {
          const BaseIdentity a = base_identity_part(f32.data(), id, n, dim, 200, threads);
          const BaseIdentity b =
              base_identity_part(bits.data(), RowFormat::kFloat16Bits, id, n, dim, 200, threads, f16c);
          const std::string what = "dim " + std::to_string(dim) + (f16c ? " f16c" : " portable") + " threads " +
                                   std::to_string(threads) + (id ? " ids" : " row ids");
          EXPECT_EQ(a.rows, b.rows) << what;
          EXPECT_EQ(a.dim, b.dim) << what;
          EXPECT_EQ(a.ids_digest, b.ids_digest) << what;
          EXPECT_EQ(a.data_digest, b.data_digest) << what;
        }
  }
  // −0 and +0 are different bytes: the identity tells them apart from either format.
  const std::vector<std::uint16_t> pos(8, 0x0000), neg(8, 0x8000);
  EXPECT_NE(base_identity_part(pos.data(), RowFormat::kFloat16Bits, nullptr, 1, 8, 0).data_digest,
            base_identity_part(neg.data(), RowFormat::kFloat16Bits, nullptr, 1, 8, 0).data_digest);
  EXPECT_EQ(base_identity_part(neg.data(), RowFormat::kFloat16Bits, nullptr, 1, 8, 0).data_digest,
            base_identity_part(as_float32(neg).data(), nullptr, 1, 8, 0).data_digest);
}

// Only a streamed shard (the CUDA engine, not cosine) of a float16 dataset travels as bits.
TEST(Float16Ingest, OnlyStreamedFloat16DatasetsTravelAsBits) {
  EXPECT_EQ(stream_format(true, Metric::kInnerProduct, "float16"), RowFormat::kFloat16Bits);
  EXPECT_EQ(stream_format(true, Metric::kL2, "float16"), RowFormat::kFloat16Bits);
  EXPECT_EQ(stream_format(true, Metric::kCosine, "float16"), RowFormat::kFloat32) << "normalised on the host";
  EXPECT_EQ(stream_format(false, Metric::kInnerProduct, "float16"), RowFormat::kFloat32) << "the CPU engine";
  EXPECT_EQ(stream_format(false, Metric::kL2, "float16"), RowFormat::kFloat32) << "the CPU engine";
  EXPECT_EQ(stream_format(true, Metric::kInnerProduct, "float32"), RowFormat::kFloat32);
  EXPECT_EQ(stream_format(true, Metric::kL2, "float64"), RowFormat::kFloat32);
  EXPECT_EQ(format_bytes(RowFormat::kFloat16Bits), 2u);
  EXPECT_EQ(format_bytes(RowFormat::kFloat32), 4u);
}

std::unique_ptr<Engine> streamed_cpu_engine(std::int64_t n, std::int64_t dim, const std::int64_t* ids, Metric m,
                                            Dtype t, RowFormat format) {
  ShardInput s;
  s.rows = n;
  s.dim = dim;
  s.ids = ids;
  s.streamed = true;
  s.stream_format = format;
  return make_cpu_engine(s, m, t, EngineLimits{4, 8}, EngineOptions{2});
}

/// Streams rows [n, dim] into e in blocks of `block`: two of every three through the engine's
/// buffers, the third from the caller's memory.
template <typename V, typename Buffer, typename Load>
void stream_blocks(const std::vector<V>& rows, std::int64_t n, std::int64_t dim, std::int64_t block, Buffer buffer,
                   Load load) {
  for (std::int64_t r0 = 0; r0 < n; r0 += block) {
    const std::int64_t m = std::min(block, n - r0);
    if ((r0 / block) % 3 != 2) {
      V* buf = buffer(block);
      std::copy(rows.begin() + r0 * dim, rows.begin() + (r0 + m) * dim, buf);
      load(r0, m, buf);
    } else {
      load(r0, m, rows.data() + r0 * dim);
    }
  }
}

TEST(Float16Ingest, CpuEngineStoresFromBitsWhatItStoresFromFloat32) {
  const std::int64_t n = 1003, block = 100;
  for (const std::int64_t dim : {std::int64_t{33}, std::int64_t{7}, std::int64_t{768}}) {
    const std::vector<std::uint16_t> bits = finite_bits(static_cast<std::size_t>(n * dim), 5 + dim);
    const std::vector<float> f32 = as_float32(bits);
    std::vector<std::int64_t> ids(static_cast<std::size_t>(n)), slots(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) ids[i] = 3 * i + 11, slots[i] = i;
    for (const Dtype t : {Dtype::kFloat16, Dtype::kBFloat16, Dtype::kFloat32})
      for (const Metric m : {Metric::kInnerProduct, Metric::kL2}) {
        const std::string what = "dim " + std::to_string(dim) + " " + to_string(t) + " " + to_string(m);
        auto a = streamed_cpu_engine(n, dim, ids.data(), m, t, RowFormat::kFloat32);
        auto b = streamed_cpu_engine(n, dim, ids.data(), m, t, RowFormat::kFloat16Bits);
        stream_blocks(
            f32, n, dim, block, [&](std::int64_t r) { return a->load_buffer(r); },
            [&](std::int64_t r0, std::int64_t r, const float* x) { a->load_rows(r0, r, x); });
        stream_blocks(
            bits, n, dim, block, [&](std::int64_t r) { return b->load_buffer_bits(r); },
            [&](std::int64_t r0, std::int64_t r, const std::uint16_t* x) { b->load_rows_bits(r0, r, x); });
        a->finish_load();
        b->finish_load();
        std::vector<float> ra(static_cast<std::size_t>(n * dim)), rb(ra.size());
        a->read_rows(slots.data(), n, ra.data());
        b->read_rows(slots.data(), n, rb.data());
        EXPECT_EQ(0, std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(float))) << what;
        if (t == Dtype::kFloat16)  // float16 storage holds the file's own bits
          for (std::size_t i = 0; i < rb.size(); ++i) ASSERT_EQ(half::to_f16(rb[i]), bits[i]) << what << " value " << i;
      }
  }
}

TEST(Float16Ingest, CpuEngineRefusesNonFiniteBitsByRowAndColumn) {
  const std::int64_t n = 20, dim = 9;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) ids[i] = 100 + i;
  const struct {
    std::uint16_t pattern;
    const char* value;
  } cases[] = {{0x7C00, "inf"}, {0xFC00, "-inf"}, {0x7E00, "nan"}, {0xFC01, "nan"}};
  for (const auto& c : cases) {
    std::vector<std::uint16_t> bits = finite_bits(static_cast<std::size_t>(n * dim), 3);
    bits[7 * dim + 4] = c.pattern;
    auto e = streamed_cpu_engine(n, dim, ids.data(), Metric::kL2, Dtype::kFloat16, RowFormat::kFloat16Bits);
    const std::string msg = test::error_of([&] { e->load_rows_bits(0, n, bits.data()); });
    EXPECT_THAT(msg, AllOf(HasSubstr("corpus row 107 value"), HasSubstr(c.value), HasSubstr("at column 4"),
                           HasSubstr("not finite")))
        << msg;
    const std::string missing = test::error_of([&] { e->finish_load(); });
    EXPECT_THAT(missing, HasSubstr("0 of 20 rows loaded")) << "the refused block is not counted";
  }
  // The float32 calls on a stream of bits, and the other way round.
  auto bits_engine = streamed_cpu_engine(n, dim, ids.data(), Metric::kL2, Dtype::kFloat16, RowFormat::kFloat16Bits);
  const std::vector<float> f(static_cast<std::size_t>(n * dim), 1.0f);
  EXPECT_THAT(test::error_of([&] { bits_engine->load_rows(0, n, f.data()); }),
              AllOf(HasSubstr("load_rows"), HasSubstr("streams float16 bits"), HasSubstr("load_rows_bits")));
  EXPECT_THAT(test::error_of([&] { bits_engine->load_buffer(4); }), HasSubstr("streams float16 bits"));
  auto f32_engine = streamed_cpu_engine(n, dim, ids.data(), Metric::kL2, Dtype::kFloat16, RowFormat::kFloat32);
  const std::vector<std::uint16_t> h(static_cast<std::size_t>(n * dim), 0x3C00);
  EXPECT_THAT(test::error_of([&] { f32_engine->load_rows_bits(0, n, h.data()); }),
              AllOf(HasSubstr("load_rows_bits"), HasSubstr("streams float32 rows")));
  EXPECT_THAT(test::error_of([&] { f32_engine->load_buffer_bits(4); }), HasSubstr("streams float32 rows"));
}

}  // namespace
}  // namespace shardtopk
