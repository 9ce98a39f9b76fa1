// kernels/fused_collect against the float64 oracle: for each query of a chunk of shard rows, the
// pool receives every row whose exact score is at least its threshold + Δ, none whose exact
// score is below the threshold − Δ, each with an approximate score within Δ of the exact one
// (docs/EXACTNESS.md, "The bound Δ"), each row at most once, nothing from outside the chunk;
// equal rows get equal approximate scores; entries already in a pool, and the pools of queries
// past the batch (whose rows of the query buffer hold values whose products overflow to ±inf),
// are untouched; a full pool raises its overflow flag. Partial tiles of rows and queries (tiles
// of 64 queries; one, two and three tiles of 128), padded dimensions that are not a multiple of
// the 64-value stage, float16 and bfloat16, inner product and l2; chunks of 140,000 rows give
// every block of the persistent grid many tiles (stages and phases carried across them). Skips
// where the device is not compute capability 9.0 (the kernel exists there only).

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "cuda_test_support.hpp"
#include "engine/cuda/kernels/fused_collect.hpp"
#include "engine/cuda/kernels/query_prep.hpp"

namespace shardtopk::test {
namespace {

using cuda_detail::CandidatePools;
using cuda_detail::FusedCollect;
using cuda_detail::PoolEntry;
using cuda_detail::QueryInfo;

constexpr int kTieClasses = 37;  // rows [0, 600) hold the values of row r % 37

double stored(Dtype dt, float x) {
  return static_cast<double>(dt == Dtype::kFloat16 ? half::from_f16(half::to_f16(x)) : half::from_bf16(half::to_bf16(x)));
}

struct Case {
  Dtype dtype;
  int dim;
  bool l2;
  int batch;  // ≤ 64: tiles of 64 queries; more: tiles of 128
  int rows_c = 2500;  // the chunk's rows (≥ 100k: many tiles per block of the persistent grid)
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(dname(info.param.dtype)) + "_d" + std::to_string(info.param.dim) + (info.param.l2 ? "_l2" : "_ip") +
         "_b" + std::to_string(info.param.batch) + "_r" + std::to_string(info.param.rows_c);
}

class FusedCollectCase : public ::testing::TestWithParam<Case> {};

TEST_P(FusedCollectCase, PoolsHoldWhatTheOracleSaysReachesEachThreshold) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const Case c = GetParam();
  const std::int64_t dpad = cuda_detail::padded_dim(c.dim, c.dtype);
  if (!cuda_detail::fused_collect_supported(c.dtype, dpad)) GTEST_SKIP() << "the fused kernel needs compute capability 9.0 and an sm_90a build";
  const int rows_c = c.rows_c;  // 2,500: 9.8 tiles of 256 rows; ends 200 rows before the shard does
  const std::int64_t row0 = 300, n = row0 + rows_c + 200;
  const int batch = c.batch, batch_max = c.batch + 56;  // rows of the query buffer past the batch hold other values
  std::mt19937_64 rng(7 + c.dim + (c.l2 ? 1000 : 0) + (c.dtype == Dtype::kFloat16 ? 0 : 2000));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> rows(static_cast<std::size_t>(n * c.dim));
  for (auto& v : rows) v = dist(rng);
  for (std::int64_t r = kTieClasses; r < 600; ++r)
    std::copy_n(rows.begin() + (r % kTieClasses) * c.dim, c.dim, rows.begin() + r * c.dim);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = i;
  const DeviceShard shard(rows, n, c.dim, c.dtype, ids);
  std::vector<float> queries(static_cast<std::size_t>(batch) * c.dim);
  for (auto& v : queries) v = dist(rng);

  // The query buffer: rows past the batch hold values whose products overflow to ±inf (float16
  // +inf, bfloat16's largest finite value): they must never reach a pool, +inf included.
  const std::uint16_t past = c.dtype == Dtype::kFloat16 ? 0x7C00 : 0x7F7F;
  DeviceArray<std::uint16_t> qhat(std::vector<std::uint16_t>(static_cast<std::size_t>(batch_max * dpad), past));
  DeviceArray<float> dq(queries), qpad(static_cast<std::size_t>(batch_max * dpad));
  DeviceArray<QueryInfo> qinfo(batch_max);
  cuda_detail::prepare_batched_queries(dq.get(), batch, c.dim, dpad, c.dtype, c.l2, shard.max_sq, qpad.get(), qhat.get(),
                                       qinfo.get(), nullptr);
  const std::vector<QueryInfo> qi = qinfo.download();

  // Exact scores (float64 of the float32 query and the stored row) of the chunk's rows.
  std::vector<double> exact(static_cast<std::size_t>(batch) * rows_c);
  for (int q = 0; q < batch; ++q)
    for (int i = 0; i < rows_c; ++i) {
      const std::int64_t r = row0 + i;
      double s = 0.0;
      for (int d = 0; d < c.dim; ++d) {
        const double x = stored(c.dtype, rows[static_cast<std::size_t>(r * c.dim + d)]);
        const double y = queries[static_cast<std::size_t>(q * c.dim + d)];
        s += c.l2 ? -(y - x) * (y - x) : y * x;
      }
      exact[static_cast<std::size_t>(q) * rows_c + i] = s;
    }
  // Thresholds: −inf (every row), +inf (none), else the exact score of the query's 60th row.
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> thr(static_cast<std::size_t>(batch_max), 0.0f);
  for (int q = 0; q < batch; ++q) {
    if (q == 3) {
      thr[q] = -inf;
    } else if (q == 4) {
      thr[q] = inf;
    } else {
      std::vector<double> s(exact.begin() + static_cast<std::ptrdiff_t>(q) * rows_c,
                            exact.begin() + static_cast<std::ptrdiff_t>(q + 1) * rows_c);
      std::nth_element(s.begin(), s.begin() + 59, s.end(), std::greater<double>());
      thr[q] = static_cast<float>(s[59]);
    }
  }
  for (int q = batch; q < batch_max; ++q) thr[q] = -inf;  // past the batch: would take every row

  const FusedCollect fused(c.dtype, shard.rows.get(), n, dpad, qhat.get(), batch_max);
  const int held = 3;
  for (const std::int64_t cap : {std::int64_t{rows_c + held}, std::int64_t{held + 40}}) {
    DeviceArray<PoolEntry> pool(static_cast<std::size_t>(batch_max * cap), 0xFF);
    std::vector<std::uint32_t> count0(static_cast<std::size_t>(batch_max), 0u);
    for (int q = 0; q < batch; ++q) count0[q] = held;
    DeviceArray<std::uint32_t> count(count0), overflow(static_cast<std::size_t>(batch_max), 0x00);
    DeviceArray<float> dthr(thr);
    const CandidatePools pools{qinfo.get(), pool.get(), cap, count.get(), dthr.get(), overflow.get(), nullptr};
    fused.enqueue(row0, rows_c, batch, c.l2, shard.row_sq.get(), pools, nullptr);
    const std::vector<PoolEntry> got = pool.download();
    const std::vector<std::uint32_t> cnt = count.download(), of = overflow.download();
    for (int q = batch; q < batch_max; ++q) {
      ASSERT_EQ(cnt[q], 0u) << "query " << q << " past the batch got entries";
      ASSERT_EQ(of[q], 0u) << "query " << q << " past the batch";
    }
    for (int q = 0; q < batch; ++q) {
      const std::string at = "cap " + std::to_string(cap) + " query " + std::to_string(q);
      const float delta = qi[q].delta;
      const PoolEntry* list = got.data() + static_cast<std::size_t>(q) * cap;
      for (int i = 0; i < held; ++i) ASSERT_EQ(list[i].row, -1) << at << ": held entry " << i << " changed";
      const std::int64_t entries = static_cast<std::int64_t>(cnt[q]) - held;
      ASSERT_GE(entries, 0) << at;
      std::int64_t must = 0, may = 0;  // rows that must enter; rows that may
      for (int i = 0; i < rows_c; ++i) {
        const double s = exact[static_cast<std::size_t>(q) * rows_c + i];
        if (s >= static_cast<double>(thr[q]) + delta) ++must;
        if (s >= static_cast<double>(thr[q]) - delta) ++may;
      }
      ASSERT_GE(entries, must) << at;
      ASSERT_LE(entries, may) << at;
      if (held + entries > cap) {
        EXPECT_NE(of[q], 0u) << at << ": " << held + entries << " entries in a pool of " << cap;
        continue;
      }
      EXPECT_EQ(of[q], 0u) << at;
      std::set<std::int32_t> seen;
      std::vector<float> tie_score(kTieClasses, std::numeric_limits<float>::quiet_NaN());
      for (std::int64_t e = held; e < held + entries; ++e) {
        const PoolEntry& p = list[e];
        ASSERT_TRUE(p.row >= row0 && p.row < row0 + rows_c) << at << ": row " << p.row << " outside the chunk";
        ASSERT_TRUE(seen.insert(p.row).second) << at << ": row " << p.row << " twice";
        const double s = exact[static_cast<std::size_t>(q) * rows_c + (p.row - row0)];
        EXPECT_GE(p.s, thr[q]) << at << ": row " << p.row;
        EXPECT_LE(std::fabs(static_cast<double>(p.s) - s), static_cast<double>(delta))
            << at << ": row " << p.row << " approximate " << p.s << " exact " << s;
        if (p.row < 600) {
          float& t = tie_score[static_cast<std::size_t>(p.row % kTieClasses)];
          if (std::isnan(t)) t = p.s;
          EXPECT_EQ(bits_of(t), bits_of(p.s)) << at << ": equal rows, row " << p.row;
        }
      }
      for (int i = 0; i < rows_c; ++i)
        if (exact[static_cast<std::size_t>(q) * rows_c + i] >= static_cast<double>(thr[q]) + delta)
          EXPECT_TRUE(seen.count(static_cast<std::int32_t>(row0 + i))) << at << ": row " << row0 + i << " missing";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Gpu, FusedCollectCase,
                         ::testing::Values(Case{Dtype::kFloat16, 768, false, 200}, Case{Dtype::kFloat16, 100, true, 200},
                                           Case{Dtype::kBFloat16, 768, true, 200}, Case{Dtype::kBFloat16, 40, false, 130},
                                           Case{Dtype::kFloat16, 8, false, 200}, Case{Dtype::kFloat16, 768, false, 50},
                                           Case{Dtype::kBFloat16, 100, true, 64}, Case{Dtype::kFloat16, 768, true, 7},
                                           Case{Dtype::kFloat16, 768, true, 100}, Case{Dtype::kBFloat16, 768, false, 300},
                                           Case{Dtype::kBFloat16, 40, true, 130, 140000},
                                           Case{Dtype::kFloat16, 100, false, 50, 140000}),
                         case_name);

TEST(FusedCollect, BadArgumentsThrowAndQueueNothing) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  if (!cuda_detail::fused_collect_supported(Dtype::kFloat16, 64)) GTEST_SKIP() << "needs compute capability 9.0";
  EXPECT_FALSE(cuda_detail::fused_collect_supported(Dtype::kFloat32, 64));
  EXPECT_FALSE(cuda_detail::fused_collect_supported(Dtype::kFloat16, 12));
  DeviceArray<std::uint16_t> shard(100 * 64), q(4 * 64);
  EXPECT_THROW(FusedCollect(Dtype::kFloat32, shard.get(), 100, 64, q.get(), 4), Error);
  EXPECT_THROW(FusedCollect(Dtype::kFloat16, shard.get(), 0, 64, q.get(), 4), Error);
  EXPECT_THROW(FusedCollect(Dtype::kFloat16, shard.get(), 100, 64, q.get(), 0), Error);
  const FusedCollect f(Dtype::kFloat16, shard.get(), 100, 64, q.get(), 4);
  DeviceArray<std::uint32_t> count(4, 0x00);
  const CandidatePools pools{nullptr, nullptr, 8, count.get(), nullptr, nullptr, nullptr};
  EXPECT_THROW(f.enqueue(90, 20, 4, false, nullptr, pools, nullptr), Error);   // past the shard
  EXPECT_THROW(f.enqueue(-1, 20, 4, false, nullptr, pools, nullptr), Error);
  EXPECT_THROW(f.enqueue(0, 0, 4, false, nullptr, pools, nullptr), Error);
  EXPECT_THROW(f.enqueue(0, 20, 5, false, nullptr, pools, nullptr), Error);    // batch > batch_max
  EXPECT_THROW(f.enqueue(0, 20, 4, true, nullptr, pools, nullptr), Error);     // l2 without norms
  EXPECT_EQ(count.download(), std::vector<std::uint32_t>(4, 0u));
}

}  // namespace
}  // namespace shardtopk::test
