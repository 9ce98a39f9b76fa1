// The batched path (B ≥ 2): kernels/candidate_pools and kernels/rescore against their
// specification computed on the host (the filter's thresholds and pools from given
// approximate scores; the re-scoring's answer = the float64 oracle's top-k over the pool's
// rows), and the whole path through BatchedSearch (query prep, cuBLAS GEMM per chunk, filter,
// compaction, re-scoring) against the float64 oracle and bit for bit against the batch-1 scan.
// The filter alone has no float64 oracle (its output is a superset of the answer by design):
// its test checks exactly the sets and thresholds its contract defines.

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_test_support.hpp"
#include "engine/cuda/batched_search.hpp"
#include "engine/cuda/kernels/candidate_pools.hpp"
#include "engine/cuda/kernels/rescore.hpp"
#include "tools/oracle.hpp"

namespace shardtopk::test {
namespace {

using cuda_detail::CandidatePools;
using cuda_detail::ChunkScores;
using cuda_detail::PoolEntry;
using cuda_detail::QueryInfo;

// ------------------------------------------------------------------------------ filter

/// The host's statement of the filter's arithmetic (Approx::finish, float, no contraction).
float approx_score(float g, const QueryInfo& qi, bool l2, float row_sq) {
  const float dot = g * qi.inv_scale;
  if (!l2) return dot;
  return (2.0f * dot - row_sq) - qi.qsq;
}

/// The score of an order-preserving key (key_of's inverse).
float score_of_key(std::uint32_t key) {
  const std::uint32_t b = (key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key;
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

/// The filter threshold: the k-th largest of `values` as the kernels' selects give it (the bits
/// of its key that the values' keys do not all share, past the first 22, cleared; −inf for a key
/// below that of −inf) minus 2Δ, in float64, rounded down to a float; -inf when there are fewer
/// than k values.
float threshold(std::vector<float> values, int k, float delta) {
  const float inf = std::numeric_limits<float>::infinity();
  if (static_cast<int>(values.size()) < k) return -inf;
  std::uint32_t lo = ~0u, hi = 0u;
  for (const float v : values) {
    lo = std::min(lo, key_of(v));
    hi = std::max(hi, key_of(v));
  }
  std::nth_element(values.begin(), values.begin() + (k - 1), values.end(), std::greater<float>());
  std::uint32_t key = key_of(values[k - 1]);
  if (lo != hi) key &= ~0u << (std::max(32 - __builtin_clz(lo ^ hi), 22) - 22);
  if (key < key_of(-inf)) return -inf;
  const double t = static_cast<double>(score_of_key(key)) - 2.0 * static_cast<double>(delta);
  float f = static_cast<float>(t);
  if (static_cast<double>(f) > t) f = std::nextafter(f, -inf);
  return f;
}

/// Sorted (score bits, row) pairs, to compare pools as multisets.
std::vector<std::pair<std::int64_t, std::uint32_t>> as_set(const PoolEntry* e, std::size_t n) {
  std::vector<std::pair<std::int64_t, std::uint32_t>> s;
  for (std::size_t i = 0; i < n; ++i) s.emplace_back(e[i].row, bits_of(e[i].s));
  std::sort(s.begin(), s.end());
  return s;
}

/// How a chunk's GEMM output values are drawn: on a coarse grid of 64 values (many ties), or, for
/// a float output, with every mantissa bit in use: 24-bit fractions in [−4, 4) (the keys differ
/// in their top bit, so the selects round the k-th down) or in [1, 2) (they differ only in the
/// low 23 bits, so the selects find it exactly).
enum class Values { kGrid, kFine, kNarrow };

/// One chunk's GEMM output [batch, ld] as floats (`values`; the grid for a __half output) and its
/// device copy as float or __half.
struct ChunkData {
  int batch, rows;
  std::int64_t ld, row0;
  bool half, l2;
  std::vector<float> g;       // [batch, ld], exact in the output type
  std::vector<float> row_sq;  // [row0 + rows]
  std::vector<QueryInfo> qinfo;
  DeviceArray<std::uint8_t> dev_s;
  DeviceArray<float> dev_row_sq;
  DeviceArray<QueryInfo> dev_qinfo;

  ChunkData(int b, int r, std::int64_t ld_, std::int64_t r0, bool h, bool l2_, std::uint64_t seed,
            Values values = Values::kGrid)
      : batch(b), rows(r), ld(ld_), row0(r0), half(h), l2(l2_) {
    std::mt19937_64 rng(seed);
    g.resize(static_cast<size_t>(batch * ld));
    for (auto& v : g) {
      const float fraction = std::ldexp(static_cast<float>(rng() >> 40), -24);  // [0, 1), 24 bits
      v = half || values == Values::kGrid ? static_cast<float>(static_cast<int>(rng() % 64) - 32) * 0.125f
          : values == Values::kFine       ? 8.0f * fraction - 4.0f
                                          : 1.0f + fraction;
    }
    row_sq.resize(static_cast<size_t>(row0 + rows));
    for (auto& v : row_sq) v = static_cast<float>(rng() % 8) * 0.5f;
    for (int q = 0; q < batch; ++q) qinfo.push_back(QueryInfo{0.03125f * (q + 1), q % 2 ? 0.5f : 1.0f, 1.5f, 0.0f});
    std::vector<std::uint8_t> raw(g.size() * (half ? 2 : 4));
    for (size_t i = 0; i < g.size(); ++i) {
      if (half) {
        const std::uint16_t hb = half::to_f16(g[i]);
        std::memcpy(&raw[2 * i], &hb, 2);
      } else {
        std::memcpy(&raw[4 * i], &g[i], 4);
      }
    }
    dev_s = DeviceArray<std::uint8_t>(raw);
    dev_row_sq = DeviceArray<float>(row_sq);
    dev_qinfo = DeviceArray<QueryInfo>(qinfo);
  }
  ChunkScores view() const {
    return ChunkScores{dev_s.get(), half, ld, rows, row0, l2 ? dev_row_sq.get() : nullptr, l2};
  }
  float approx(int q, int i) const { return approx_score(g[q * ld + i], qinfo[q], l2, l2 ? row_sq[row0 + i] : 0.0f); }
};

/// Pools [batch, cap] on the device, with counts, thresholds and overflow flags.
struct Pools {
  int batch;
  std::int64_t cap;
  DeviceArray<PoolEntry> pool;
  DeviceArray<std::uint32_t> count, overflow;
  DeviceArray<float> thr;
  DeviceArray<std::uint32_t> seen;
  Pools(int b, std::int64_t c)
      : batch(b),
        cap(c),
        pool(static_cast<size_t>(b * c), 0xFF),
        count(b, 0x00),
        overflow(b, 0x00),
        thr(b, 0x00),
        seen(b, 0x00) {}
  CandidatePools view(const QueryInfo* qinfo) const {
    return CandidatePools{qinfo, pool.get(), cap, count.get(), thr.get(), overflow.get(), seen.get()};
  }
};

// The first chunk: each query's threshold is its k-th approximate score (as the selects give it:
// threshold()) minus 2Δ (rounded down; -inf with fewer rows than k), and its pool holds exactly
// the chunk's rows that reach it. Rows 37, 1,000 and 8,192; k = 1, 10, 100, the rows and more
// than the rows; float and __half GEMM outputs; inner product and l2 (2 · dot − ‖x‖² − ‖q‖²); scores on a
// grid of 64 values, so that hundreds tie at the k-th, or (float output) fine ones whose k-th
// the selects round down or find exactly (Values); and with a live mask that keeps 1 row in 16:
// the rows it drops count as −inf (fewer live rows than k: threshold −inf) and never enter the
// pool.
TEST(BatchedFilter, FirstChunkThresholdsAndPools) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const float inf = std::numeric_limits<float>::infinity();
  const int batch = 3;
  const std::int64_t row0 = 4096;
  std::vector<std::uint32_t> live((row0 + 8192) / 32, 0u);
  std::mt19937_64 lrng(77);
  for (auto& w : live) w = static_cast<std::uint32_t>(lrng() & lrng() & lrng() & lrng());  // ~1/16 live
  const DeviceArray<std::uint32_t> dev_live(live);
  auto is_live = [&](std::int64_t r) { return (live[static_cast<size_t>(r >> 5)] >> (r & 31)) & 1u; };
  for (const int rows : {37, 1000, 8192})
    for (const bool half : {false, true})
      for (const bool l2 : {false, true})
        for (const int k : {1, 10, 100, rows, rows + 5})
          for (const char* mode : {"grid", "fine", "narrow", "masked"}) {
            const Values values = mode[0] == 'f' ? Values::kFine : mode[0] == 'n' ? Values::kNarrow : Values::kGrid;
            const bool masked = mode[0] == 'm';
            if (half && values != Values::kGrid) continue;
            std::ostringstream os;
            os << "rows " << rows << " k " << k << (half ? " __half" : " float") << (l2 ? " l2 " : " ip ") << mode;
            const std::string what = os.str();
            const ChunkData c(batch, rows, rows, row0, half, l2, 7 + rows + k, values);
            Pools p(batch, 16384);
            cuda_detail::RowMasks masks;
            masks.live = dev_live.get();
            masks.words = static_cast<std::int64_t>(live.size());
            const cuda_detail::ChunkQueries cq{nullptr, masked ? &masks : nullptr, false};
            cuda_detail::seed_chunk(c.view(), batch, k, p.view(c.dev_qinfo.get()), cq, true, nullptr);
            const std::vector<PoolEntry> pool = p.pool.download();
            const std::vector<std::uint32_t> count = p.count.download(), overflow = p.overflow.download();
            const std::vector<float> thr = p.thr.download();
            for (int q = 0; q < batch; ++q) {
              std::vector<float> a(static_cast<size_t>(rows));
              for (int i = 0; i < rows; ++i) a[i] = !masked || is_live(row0 + i) ? c.approx(q, i) : -inf;
              const float t = threshold(a, k, c.qinfo[q].delta);
              EXPECT_EQ(bits_of(thr[q]), bits_of(t)) << what << " query " << q << ": threshold " << thr[q] << " want " << t;
              std::vector<PoolEntry> want;
              for (int i = 0; i < rows; ++i)
                if (a[i] >= t && a[i] != -inf) want.push_back(PoolEntry{a[i], static_cast<std::int32_t>(c.row0 + i)});
              ASSERT_EQ(count[q], want.size()) << what << " query " << q;
              EXPECT_EQ(overflow[q], 0u) << what;
              EXPECT_EQ(as_set(pool.data() + q * p.cap, count[q]), as_set(want.data(), want.size())) << what << " query " << q;
            }
          }
}

// The first chunk into pools too small for what reaches the threshold: the query's overflow flag
// is set, its count says how many reached it, and the entries that fit are rows that reached it
// with their scores, none written past the query's capacity (the pools lie end to end, so an
// entry past it would land in the next query's pool, whose entries are checked as its own).
// k = 100 of 1,000 to 8,192 rows: the held path (unmasked: one append per block) and the
// streaming one (masked, every other row allowed: one append per warp); scores on the grid.
TEST(BatchedFilter, FirstChunkPoolsTooSmallOverflow) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const int batch = 3, k = 100;
  const std::int64_t row0 = 0, cap = 40;
  const float inf = std::numeric_limits<float>::infinity();
  for (const int rows : {1000, 4096, 8192})
    for (const bool masked : {false, true})
      for (const bool half : {false, true}) {
        const std::string what = "rows " + std::to_string(rows) + (masked ? " masked" : "") + (half ? " __half" : " float");
        const ChunkData c(batch, rows, rows, row0, half, false, 5 + rows);
        std::vector<std::uint32_t> live(static_cast<size_t>((rows + 31) / 32), 0x55555555u);  // every other row
        const DeviceArray<std::uint32_t> dev_live(live);
        cuda_detail::RowMasks masks;
        masks.live = dev_live.get();
        masks.words = static_cast<std::int64_t>(live.size());
        Pools p(batch, cap);
        const cuda_detail::ChunkQueries cq{nullptr, masked ? &masks : nullptr, false};
        cuda_detail::seed_chunk(c.view(), batch, k, p.view(c.dev_qinfo.get()), cq, true, nullptr);
        const std::vector<PoolEntry> pool = p.pool.download();
        const std::vector<std::uint32_t> count = p.count.download(), overflow = p.overflow.download();
        for (int q = 0; q < batch; ++q) {
          const std::string at = what + " query " + std::to_string(q);
          std::vector<float> a(static_cast<size_t>(rows));
          for (int i = 0; i < rows; ++i) a[i] = !masked || i % 2 == 0 ? c.approx(q, i) : -inf;
          const float t = threshold(a, k, c.qinfo[q].delta);
          std::size_t reach = 0;
          for (const float v : a) reach += v >= t && v != -inf ? 1 : 0;
          ASSERT_GT(reach, static_cast<std::size_t>(cap)) << at << ": the case needs more rows at the threshold than the pool holds";
          EXPECT_NE(overflow[q], 0u) << at;
          EXPECT_EQ(count[q], reach) << at;
          for (std::int64_t e = 0; e < cap; ++e) {
            const PoolEntry& got = pool[static_cast<size_t>(q * cap + e)];
            ASSERT_GE(got.row, 0) << at << ": entry " << e << " not written";
            ASSERT_LT(got.row, rows) << at << ": entry " << e;
            EXPECT_EQ(bits_of(got.s), bits_of(a[static_cast<size_t>(got.row)])) << at << ": entry " << e << " row " << got.row;
            EXPECT_GE(got.s, t) << at << ": entry " << e << " row " << got.row;
          }
        }
      }
}

// A later chunk: every (query, row) reaching the query's threshold is appended after what the
// pool holds; leading dimensions equal to the rows and beyond (vector loads when the stride
// allows, scalar ones otherwise); a pool too small for its rows reports an overflow.
TEST(BatchedFilter, LaterChunksAppendWhatReachesTheThreshold) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const int batch = 3, held = 5;
  for (const auto& [rows, ld] : {std::pair<int, std::int64_t>{37, 37}, {8192, 8192}, {1000, 1024}, {5000, 5003}})
    for (const bool half : {false, true})
      for (const bool l2 : {false, true}) {
        std::ostringstream os;
        os << "rows " << rows << " ld " << ld << (half ? " __half" : " float") << (l2 ? " l2" : " ip");
        const std::string what = os.str();
        const ChunkData c(batch, rows, ld, 70000, half, l2, 11 + rows);
        for (const std::int64_t cap : {std::int64_t{16384}, std::int64_t{held + 10}}) {
          Pools p(batch, cap);
          const std::vector<float> thr = {0.5f, -std::numeric_limits<float>::infinity(), 2.0f};
          p.thr.upload(thr);
          std::vector<PoolEntry> pool(static_cast<size_t>(batch * cap), PoolEntry{-7.0f, -1});
          p.pool.upload(pool);
          p.count.upload(std::vector<std::uint32_t>(batch, held));
          cuda_detail::collect_chunk(c.view(), batch, 10, p.view(c.dev_qinfo.get()), cuda_detail::ChunkQueries{},
                                     nullptr);
          const std::vector<PoolEntry> got = p.pool.download();
          const std::vector<std::uint32_t> count = p.count.download(), overflow = p.overflow.download();
          for (int q = 0; q < batch; ++q) {
            std::vector<PoolEntry> want;
            for (int i = 0; i < rows; ++i) {
              const float a = c.approx(q, i);
              if (a >= thr[q]) want.push_back(PoolEntry{a, static_cast<std::int32_t>(c.row0 + i)});
            }
            const std::string at = what + " cap " + std::to_string(cap) + " query " + std::to_string(q);
            EXPECT_EQ(count[q], held + want.size()) << at;
            for (int i = 0; i < held; ++i) EXPECT_EQ(got[q * cap + i].row, -1) << at << ": held entry " << i << " changed";
            if (held + static_cast<std::int64_t>(want.size()) <= cap) {
              EXPECT_EQ(overflow[q], 0u) << at;
              EXPECT_EQ(as_set(got.data() + q * cap + held, want.size()), as_set(want.data(), want.size())) << at;
            } else {
              EXPECT_NE(overflow[q], 0u) << at << ": " << held + want.size() << " entries in a pool of " << cap;
            }
          }
        }
      }
}

// The masked collect's flood guard: per block of the collect (8,192 rows of a __half output,
// 4,096 of a float one), a query's allowed rows (here: rows the live mask keeps) that reach its
// threshold all enter its pool while they are at most max(512, 2k); beyond, only those at or
// above the k-th of them minus 2Δ (rounded down). Thresholds −inf (every block floods), a
// middle one (its blocks flood under inner product, not under l2) and a high one (none); k = 1,
// 50, 300; a chunk whose last block is short; scores on a grid of 64 values, so that hundreds tie at each block's k-th.
TEST(BatchedFilter, FloodGuardKeepsWhatReachesEachBlocksKth) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const float inf = std::numeric_limits<float>::infinity();
  const int batch = 3, rows = 20000;
  const std::int64_t row0 = 1000;
  std::vector<std::uint32_t> live((row0 + rows + 31) / 32, 0u);
  std::mt19937_64 rng(91);
  for (auto& w : live) w = static_cast<std::uint32_t>(rng()) | static_cast<std::uint32_t>(rng());  // ~3/4 live
  const DeviceArray<std::uint32_t> dev_live(live);
  auto is_live = [&](std::int64_t r) { return (live[static_cast<size_t>(r >> 5)] >> (r & 31)) & 1u; };
  for (const bool half : {false, true})
    for (const bool l2 : {false, true})
      for (const int k : {1, 50, 300}) {
        const std::string what = std::string(half ? "__half" : "float") + (l2 ? " l2" : " ip") + " k " +
                                 std::to_string(k);
        const ChunkData c(batch, rows, rows, row0, half, l2, 31 + k);
        const int block = half ? 8192 : 4096;
        const std::size_t budget = k > 256 ? 2 * static_cast<std::size_t>(k) : 512;
        const std::vector<float> thr = {-inf, 1.0f, 3.5f};
        Pools p(batch, 16384);
        p.thr.upload(thr);
        cuda_detail::RowMasks masks;
        masks.live = dev_live.get();
        masks.words = static_cast<std::int64_t>(live.size());
        const cuda_detail::ChunkQueries cq{nullptr, &masks, false};
        cuda_detail::collect_chunk(c.view(), batch, k, p.view(c.dev_qinfo.get()), cq, nullptr);
        const std::vector<PoolEntry> pool = p.pool.download();
        const std::vector<std::uint32_t> count = p.count.download(), overflow = p.overflow.download();
        int guarded = 0;
        for (int q = 0; q < batch; ++q) {
          std::vector<PoolEntry> want;
          for (int b0 = 0; b0 < rows; b0 += block) {
            std::vector<float> taken;
            for (int i = b0; i < std::min(rows, b0 + block); ++i)
              if (is_live(c.row0 + i) && c.approx(q, i) >= thr[q]) taken.push_back(c.approx(q, i));
            const float tb = taken.size() > budget ? threshold(taken, k, c.qinfo[q].delta) : -inf;
            guarded += taken.size() > budget ? 1 : 0;
            for (int i = b0; i < std::min(rows, b0 + block); ++i) {
              const float a = c.approx(q, i);
              if (is_live(c.row0 + i) && a >= thr[q] && a >= tb)
                want.push_back(PoolEntry{a, static_cast<std::int32_t>(c.row0 + i)});
            }
          }
          const std::string at = what + " query " + std::to_string(q);
          ASSERT_EQ(overflow[q], 0u) << at;
          ASSERT_EQ(count[q], want.size()) << at;
          EXPECT_EQ(as_set(pool.data() + q * p.cap, count[q]), as_set(want.data(), want.size())) << at;
        }
        EXPECT_GT(guarded, 0) << what << ": no block reached the guard";
      }
}

// When the guard alone bounds a pool between compactions (host arithmetic, no GPU needed):
// blocks of 8,192 rows (__half output) or 4,096 (float), max(512, 2k) entries each, within
// three quarters of the pool.
TEST(BatchedFilter, TheGuardBoundsChunksOfFewBlocks) {
  using cuda_detail::guard_bounds_chunks;
  EXPECT_TRUE(guard_bounds_chunks(49152, true, 100, 4, 16384));    // 6 blocks × 512 × 4 = 12,288
  EXPECT_FALSE(guard_bounds_chunks(49153, true, 100, 4, 16384));   // 7 blocks
  EXPECT_TRUE(guard_bounds_chunks(196608, true, 100, 1, 16384));   // 24 blocks, compacted after each
  EXPECT_FALSE(guard_bounds_chunks(393216, true, 100, 1, 16384));  // 48 blocks (a batch of 32)
  EXPECT_TRUE(guard_bounds_chunks(24576, false, 100, 4, 16384));   // float: 6 blocks of 4,096
  EXPECT_FALSE(guard_bounds_chunks(65536, false, 100, 4, 16384));  // float: 16 blocks
  EXPECT_TRUE(guard_bounds_chunks(49152, true, 1000, 1, 16384));   // 6 × 2,000 = 12,000
  EXPECT_FALSE(guard_bounds_chunks(49152, true, 1000, 4, 16384));
  EXPECT_FALSE(guard_bounds_chunks(49152, true, 100, 4, 8192));    // a smaller pool
}

// A filtered batch's chunk: its GEMM scored only some queries (row j of the output is query
// qmap[j]). seed_chunk (not first) raises the threshold of a query that saw fewer than 1/8 of
// the chunk's rows (at −inf: none) to the k-th value of a strided sample of the chunk (every row
// of a short chunk; every 3rd of a chunk of 70,000 rows, the sample being at most 32,768 rows)
// minus 2Δ, counting the sampled rows, and adds nothing to its pool; collect_chunk then takes
// what reaches each query's threshold. Queries the chunk left out keep their pools, thresholds
// and counts.
TEST(BatchedFilter, SeededQueriesAndChunkSubsets) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const float inf = std::numeric_limits<float>::infinity();
  for (const int rows : {1000, 70000})
    for (const bool half : {false, true})
      for (const bool l2 : {false, true})
        for (const int k : {1, 50, 2000}) {
          const std::string what = std::string(half ? "__half" : "float") + (l2 ? " l2" : " ip") + " k " +
                                   std::to_string(k) + " rows " + std::to_string(rows);
          const int batch = 4;
          const int stride = (rows + 32767) / 32768, samples = (rows + stride - 1) / stride;
          const float t3 = rows > 1000 ? 1.5f : 0.5f;  // query 3's own threshold (its pool fits)
          const ChunkData c(batch, rows, rows, 4096, half, l2, 23 + k);  // GEMM rows 0, 1 used
          Pools p(batch, 16384);
          p.thr.upload({7.0f, -inf, -inf, t3});
          p.seen.upload({5u, 0u, 0u, static_cast<std::uint32_t>(rows / 8)});
          const DeviceArray<std::int32_t> qmap(std::vector<std::int32_t>{3, 1});
          const cuda_detail::ChunkQueries cq{qmap.get(), nullptr, true};
          const CandidatePools pv = p.view(c.dev_qinfo.get());
          cuda_detail::seed_chunk(c.view(), 2, k, pv, cq, false, nullptr);
          EXPECT_EQ(p.count.download(), std::vector<std::uint32_t>(4, 0u)) << what << ": seeding appends nothing";
          cuda_detail::collect_chunk(c.view(), 2, k, pv, cq, nullptr);
          const std::vector<PoolEntry> pool = p.pool.download();
          const std::vector<std::uint32_t> count = p.count.download();
          const std::vector<float> thr = p.thr.download();
          // GEMM row j holds query qmap[j]'s values
          auto value = [&](int j, int q, int i) {
            return approx_score(c.g[j * c.ld + i], c.qinfo[q], l2, l2 ? c.row_sq[c.row0 + i] : 0.0f);
          };
          std::vector<float> a1;
          for (int i = 0; i < rows; i += stride) a1.push_back(value(1, 1, i));
          const float t1 = threshold(a1, k, c.qinfo[1].delta);
          EXPECT_EQ(bits_of(thr[1]), bits_of(t1)) << what << ": query 1 seeded from the sample";
          EXPECT_EQ(thr[3], t3) << what << ": query 3 kept its threshold";
          EXPECT_EQ(thr[0], 7.0f) << what;
          EXPECT_TRUE(std::isinf(thr[2]) && thr[2] < 0) << what;
          EXPECT_EQ(count[0], 0u) << what << ": query 0 was not in the chunk";
          EXPECT_EQ(count[2], 0u) << what << ": query 2 was not in the chunk";
          const std::vector<std::uint32_t> seen = p.seen.download();
          EXPECT_EQ(seen, (std::vector<std::uint32_t>{5u, static_cast<std::uint32_t>(samples), 0u,
                                                      static_cast<std::uint32_t>(rows / 8)}))
              << what << ": the seeded query counts the sampled rows";
          for (const auto& [q, j, t] : {std::tuple<int, int, float>{1, 1, t1}, {3, 0, t3}}) {
            std::vector<PoolEntry> want;
            for (int i = 0; i < rows; ++i)
              if (value(j, q, i) >= t) want.push_back(PoolEntry{value(j, q, i), static_cast<std::int32_t>(c.row0 + i)});
            ASSERT_EQ(count[q], want.size()) << what << " query " << q;
            EXPECT_EQ(as_set(pool.data() + q * p.cap, count[q]), as_set(want.data(), want.size()))
                << what << " query " << q;
          }
        }
}

// Compaction of pools above the trigger: the threshold rises to max(old, k-th − 2Δ) and the
// entries below it leave, the others keeping their order; pools at or below the trigger and
// pools with fewer than k entries (threshold -inf: nothing leaves) stay as they are.
TEST(BatchedFilter, CompactionKeepsTheOrderOfWhatReachesTheNewThreshold) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const int batch = 4;
  const std::int64_t cap = 16384;
  const std::uint32_t trigger = 256;
  const std::vector<int> sizes = {3000, 256, 12000, 300};  // above, at, above, above the trigger
  const std::vector<float> old_thr = {-1.0f, 0.0f, 3.5f, -100.0f};
  for (const int k : {1, 10, 500}) {
    std::mt19937_64 rng(31 + k);
    std::vector<PoolEntry> pool(static_cast<size_t>(batch * cap), PoolEntry{0.0f, 0});
    std::vector<QueryInfo> qinfo;
    for (int q = 0; q < batch; ++q) {
      for (int i = 0; i < sizes[q]; ++i)
        pool[q * cap + i] = PoolEntry{static_cast<float>(static_cast<int>(rng() % 80) - 40) * 0.125f, i};
      qinfo.push_back(QueryInfo{0.0625f * q, 1.0f, 0.0f, 0.0f});
    }
    Pools p(batch, cap);
    p.pool.upload(pool);
    p.count.upload(std::vector<std::uint32_t>(sizes.begin(), sizes.end()));
    p.thr.upload(old_thr);
    DeviceArray<QueryInfo> dq(qinfo);
    cuda_detail::compact_pools(batch, k, trigger, p.view(dq.get()), nullptr);
    const std::vector<PoolEntry> got = p.pool.download();
    const std::vector<std::uint32_t> count = p.count.download();
    const std::vector<float> thr = p.thr.download();
    for (int q = 0; q < batch; ++q) {
      const std::string at = "k " + std::to_string(k) + " query " + std::to_string(q);
      std::vector<PoolEntry> want(pool.begin() + q * cap, pool.begin() + q * cap + sizes[q]);
      float t = old_thr[q];
      if (sizes[q] > static_cast<int>(trigger)) {
        std::vector<float> s;
        for (const PoolEntry& e : want) s.push_back(e.s);
        t = std::max(old_thr[q], threshold(s, k, qinfo[q].delta));
        want.erase(std::remove_if(want.begin(), want.end(), [&](const PoolEntry& e) { return !(e.s >= t); }),
                   want.end());
      }
      EXPECT_EQ(bits_of(thr[q]), bits_of(t)) << at;
      ASSERT_EQ(count[q], want.size()) << at;
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[q * cap + i].row, want[i].row) << at << ": entry " << i << " (order kept)";
        ASSERT_EQ(bits_of(got[q * cap + i].s), bits_of(want[i].s)) << at << ": entry " << i;
      }
    }
  }
}

// ------------------------------------------------------------------------------ re-scoring

// The pools' rows re-scored exactly: the answer is the float64 oracle's top-k over exactly the
// rows in each pool, ties included (small integers). Pools whose approximate scores are the
// exact ones and Δ = 0.25: the threshold (k-th − 0.5) drops the rows below the k-th, keeps the
// ties; pools of equal approximate scores: every row passes. A query flagged as overflowed is
// left untouched; one whose passing rows exceed the sort's capacity is flagged (bit 1).
TEST(Rescore, PoolRowsRescoredEqualTheOracleOverThem) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const std::int64_t n = 6000;
  const int batch = 4, cap = 4096;
  const std::int64_t pcap = 4 * cap;
  cuda_detail::prepare_rescore(cap);
  for (const Dtype dt : {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16})
    for (const Metric m : {Metric::kInnerProduct, Metric::kL2})
      for (const std::int64_t dim : {1, 7, 100}) {
        const std::string what = std::string(dname(dt)) + " " + mname(m) + " D=" + std::to_string(dim);
        const std::vector<float> rows = small_ints(static_cast<size_t>(n * dim), 40 + dim, -2, 2);
        const std::vector<std::int64_t> ids = shuffled_ids(n, 41);
        const DeviceShard shard(rows, n, dim, dt, ids);
        const std::vector<float> q = small_ints(static_cast<size_t>(batch * dim), 42 + dim, -2, 2);
        std::vector<float> qpad(static_cast<size_t>(batch * shard.dpad), 0.0f);
        for (int i = 0; i < batch; ++i) std::copy(q.begin() + i * dim, q.begin() + (i + 1) * dim, qpad.begin() + i * shard.dpad);
        const int k = 50;
        // pool of query i: every (i + 2)-th row (query 3: 5,000 rows, beyond cap when all pass)
        std::vector<PoolEntry> pool(static_cast<size_t>(batch * pcap));
        std::vector<std::uint32_t> count(batch);
        std::vector<std::vector<std::int64_t>> members(batch);
        for (int i = 0; i < batch; ++i) {
          const int step = i == 3 ? 1 : i + 2;
          for (std::int64_t r = 0, j = 0; r < n && j < (i == 3 ? 5000 : pcap); r += step, ++j) {
            double s = 0.0;
            for (std::int64_t d = 0; d < dim; ++d) {
              const double x = rows[r * dim + d], y = q[i * dim + d];
              s += m == Metric::kL2 ? -(x - y) * (x - y) : x * y;
            }
            // queries 0 and 2: the exact score as approximation; 1 and 3: all equal
            pool[i * pcap + j] = PoolEntry{i % 2 == 0 ? static_cast<float>(s) : 1.0f, static_cast<std::int32_t>(r)};
            members[i].push_back(r);
            count[i] = static_cast<std::uint32_t>(j + 1);
          }
        }
        const std::vector<QueryInfo> qinfo(batch, QueryInfo{0.25f, 1.0f, 0.0f, 0.0f});
        DeviceArray<PoolEntry> dpool(pool);
        DeviceArray<std::uint32_t> dcount(count), doverflow(std::vector<std::uint32_t>{0u, 0u, 1u, 0u});
        DeviceArray<QueryInfo> dqinfo(qinfo);
        DeviceArray<float> dqpad(qpad);
        DeviceArray<Candidate> out(static_cast<size_t>(batch * k), 0xFF);
        const CandidatePools pools{dqinfo.get(), dpool.get(), pcap, dcount.get(), nullptr, doverflow.get()};
        cuda_detail::rescore_pools(dt, m == Metric::kL2, shard.rows.get(), shard.nvec(), dqpad.get(), k, pools, cap,
                                   shard.ids.get(), batch, out.get(), nullptr);
        const std::vector<Candidate> got = out.download();
        const std::vector<std::uint32_t> overflow = doverflow.download();
        for (int i = 0; i < 2; ++i) {
          std::vector<float> sub;
          std::vector<std::int64_t> sub_ids;
          for (const std::int64_t r : members[i]) {
            sub.insert(sub.end(), rows.begin() + r * dim, rows.begin() + (r + 1) * dim);
            sub_ids.push_back(ids[r]);
          }
          const std::vector<Candidate> mine(got.begin() + i * k, got.begin() + (i + 1) * k);
          const std::vector<float> qi(q.begin() + i * dim, q.begin() + (i + 1) * dim);
          expect_exact_candidates(m, sub, static_cast<std::int64_t>(sub_ids.size()), sub_ids, qi, 1, dim, k, mine,
                                  what + " query " + std::to_string(i));
          EXPECT_EQ(overflow[i], 0u) << what << " query " << i;
        }
        EXPECT_EQ(overflow[2], 1u) << what << ": a flagged query keeps its flag";
        EXPECT_EQ(overflow[3], 2u) << what << ": 5,000 passing rows exceed the sort's 4,096";
        for (int i = 2; i < 4; ++i)
          for (int j = 0; j < k; ++j)
            ASSERT_EQ(got[i * k + j].id, -1) << what << ": query " << i << " slot " << j << " was written";
      }
}

// ------------------------------------------------------------------------------ the whole path

/// A shard in an engine arena (make_plan / carve) searched through BatchedSearch, with the
/// engine's fallback for overflowed pools: the batch-1 scan of those queries.
class BatchedRun {
 public:
  BatchedRun(const std::vector<float>& rows, std::int64_t n, std::int64_t dim, Dtype dt, bool l2,
             const std::vector<std::int64_t>& ids, const EngineLimits& lim)
      : dim_(dim), plan_(cuda_detail::make_plan(n, dim, dt, lim)), shard_(rows, n, dim, dt, ids) {
    arena_.allocate(plan_.total);
    ws_ = plan_.carve(arena_.get(), l2);
    // the engine's layout of the shard: copy the stored rows, ids and norms into the arena
    CHECK_CUDA(cudaMemcpy(ws_.shard, shard_.rows.get(), static_cast<size_t>(n * plan_.dpad) * dtype_bytes(dt),
                          cudaMemcpyDeviceToDevice));
    CHECK_CUDA(cudaMemcpy(ws_.ids, shard_.ids.get(), static_cast<size_t>(n) * 8, cudaMemcpyDeviceToDevice));
    if (l2) CHECK_CUDA(cudaMemcpy(ws_.row_sq, shard_.row_sq.get(), static_cast<size_t>(n) * 4, cudaMemcpyDeviceToDevice));
    CHECK_CUDA(cudaMemset(ws_.qpad, 0, static_cast<size_t>(lim.batch_max * plan_.dpad) * 4));
    stream_.create();
    search_.emplace(dt, l2, n, dim, plan_, ws_, lim, cuda_detail::cand_cap(lim), stream_.get());
    scan_.emplace(shard_, l2, cuda_detail::cand_cap(lim));
  }

  /// Candidates [nq, k] in batches of `batch`; *fallbacks counts the overflowed queries, which
  /// are re-run through the scan (their rows must have been left unwritten).
  std::vector<Candidate> search(const std::vector<float>& queries, std::int64_t nq, int batch, int k,
                                int* fallbacks) {
    std::vector<Candidate> all(static_cast<size_t>(nq * k));
    *fallbacks = 0;
    for (std::int64_t q0 = 0; q0 < nq; q0 += batch) {
      const int b = static_cast<int>(std::min<std::int64_t>(batch, nq - q0));
      const std::vector<float> qb(queries.begin() + q0 * dim_, queries.begin() + (q0 + b) * dim_);
      DeviceArray<float> dq(qb);
      DeviceArray<Candidate> out(static_cast<size_t>(b) * k, 0xFF);
      search_->enqueue(dq.get(), b, k, out.get(), shard_.max_sq, stream_.get());
      CHECK_CUDA(cudaStreamSynchronize(stream_.get()));
      std::vector<std::uint32_t> overflow(static_cast<size_t>(b));
      CHECK_CUDA(cudaMemcpy(overflow.data(), ws_.overflow, overflow.size() * 4, cudaMemcpyDeviceToHost));
      std::vector<Candidate> got = out.download();
      for (int q = 0; q < b; ++q) {
        if (overflow[q] == 0) continue;
        ++*fallbacks;
        for (int j = 0; j < k; ++j)
          EXPECT_EQ(got[q * k + j].id, -1) << "an overflowed query's row must be left for the fallback";
        const std::vector<float> one(qb.begin() + q * dim_, qb.begin() + (q + 1) * dim_);
        const std::vector<Candidate> alone = scan_->search(one, 1, k);
        std::copy(alone.begin(), alone.end(), got.begin() + q * k);
      }
      std::copy(got.begin(), got.end(), all.begin() + q0 * k);
    }
    return all;
  }
  ScanRun& scan() { return *scan_; }
  const cuda_detail::BatchedSearch& batched() const { return *search_; }

 private:
  std::int64_t dim_;
  cuda_detail::Plan plan_;
  DeviceShard shard_;
  cuda_detail::DeviceBuffer arena_;
  cuda_detail::Workspace ws_;
  cuda_detail::Stream stream_;
  std::optional<cuda_detail::BatchedSearch> search_;
  std::optional<ScanRun> scan_;
};

EngineLimits limits(int batch_max, int k_max) {
  EngineLimits l;
  l.batch_max = batch_max;
  l.k_max = k_max;
  return l;
}

std::vector<SearchCase> path_cases() {
  return search_cases(
      {
          // n, dim, batch, k, k_max, batch_max     why
          {1, 7, 3, 1, 16, 8},               // N = 1, K = 1: one chunk of one row
          {37, 3, 5, 37, 64, 8},             // K = N
          {5, 33, 2, 10, 16, 8},             // rows < K: padding
          {100, 5, 2, 1024, 1024, 8},        // K = 1024 > rows
          {3000, 1, 4, 1024, 1024, 8},       // D = 1: five distinct scores, ties everywhere
          {5000, 7, 3, 100, 1024, 8},        // D = 7: a partial chunk
          {4100, 784, 2, 50, 1024, 8},       // D = 784
          {9000, 16, 64, 10, 1024, 64},      // batch = batch_max = 64
          {20000, 33, 3, 3000, 4096, 8},     // K = 3000
          {30000, 3, 2, 8000, 8192, 8},      // K = 8000 (k_max at its limit), 25 distinct scores
          {20000, 33, 3, 50, 64, 1024},      // batch_max 1024: the GEMM buffer is shared by more queries
          {60000, 16, 600, 10, 64, 1024},    // B > 512: float16 chunks of 24,576 rows (plan.hpp)
          {8192 + 37, 768, 64, 10, 16, 64},  // a 37-row tail chunk after the first 8,192 rows
          {1000000, 16, 8, 10, 16, 8},       // many chunks: the chunk growth and the compactions
      },
      {Metric::kInnerProduct, Metric::kL2});
}

class BatchedPath : public ::testing::TestWithParam<SearchCase> {};

// Small integers in [-2, 2]: the batched answer (with the fallback for any overflowed pool,
// counted and printed) equals the float64 oracle exactly, ties on shuffled global ids included.
TEST_P(BatchedPath, IdsAndScoresEqualTheOracle) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const SearchCase& p = GetParam();
  const std::vector<float> rows = small_ints(static_cast<size_t>(p.n * p.dim), 100 + p.n + p.dim, -2, 2);
  const std::vector<std::int64_t> ids = shuffled_ids(p.n, 200 + p.n);
  BatchedRun run(rows, p.n, p.dim, p.dtype, p.metric == Metric::kL2, ids, limits(p.batch_max, p.k_max));
  const std::vector<float> q = small_ints(static_cast<size_t>(p.batch * p.dim), 300 + p.dim, -2, 2);
  int fallbacks = 0;
  const std::vector<Candidate> got = run.search(q, p.batch, p.batch, p.k, &fallbacks);
  std::printf("  [%s] %d of %d queries fell back to the scan\n", p.name().c_str(), fallbacks, p.batch);
  expect_exact_candidates(p.metric, rows, p.n, ids, q, p.batch, p.dim, p.k, got, p.name());
}

INSTANTIATE_TEST_SUITE_P(Gpu, BatchedPath, ::testing::ValuesIn(path_cases()), case_name);

// The chunk plan: a chunk's GEMM output fits kChunkBudget, except that float16 batches of
// more than kLongChunkBatch queries take kMinHalfChunkRows rows; the chunks tile the shard.
TEST(BatchedPath, LargeFloat16BatchesTakeLongerChunks) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const std::int64_t n = 200000, dim = 16;
  const std::vector<float> raw = random_floats(static_cast<size_t>(n * dim), 810);
  const std::vector<std::int64_t> ids = shuffled_ids(n, 811);
  // (dtype, batch) -> the largest chunk's rows
  const struct {
    Dtype dt;
    int batch;
    std::int64_t rows;
  } cases[] = {
      {Dtype::kFloat16, 1024, cuda_detail::kMinHalfChunkRows},  // 24 MiB would give 12,288
      {Dtype::kFloat16, 600, cuda_detail::kMinHalfChunkRows},
      {Dtype::kFloat16, 512, 24576},                          // the budget: 24 MiB / (2 B × 512)
      {Dtype::kFloat16, 256, 49152},
      {Dtype::kBFloat16, 1024, 6144},                         // float32 output: 24 MiB / (4 B × 1024)
      {Dtype::kFloat32, 1024, 6144},
  };
  for (const auto& c : cases) {
    BatchedRun run(raw, n, dim, c.dt, false, ids, limits(1024, 64));
    const std::vector<cuda_detail::RowChunk> chunks = run.batched().chunks(c.batch, 10);
    std::int64_t next = 0, longest = 0;
    for (const cuda_detail::RowChunk& ch : chunks) {
      EXPECT_EQ(ch.row0, next);
      next += ch.rows;
      longest = std::max<std::int64_t>(longest, ch.rows);
    }
    EXPECT_EQ(next, n) << dname(c.dt) << " B = " << c.batch;
    EXPECT_EQ(longest, c.rows) << dname(c.dt) << " B = " << c.batch;
  }
}

// The fused kernel's chunk plan holds no GEMM output: after the first chunk (which seeds the
// thresholds: 8,192 rows, 4,096 up to 64 queries) each chunk has at most 8 × the rows before it,
// and, above 64 queries, at most 196,608 rows or as many as came before it, the larger:
// 1,000,000 rows take 5 chunks at B = 256 (8,192, 65,536, 196,608, 270,336, 459,328) where the
// GEMM plan's 49,152-row buffer takes 22, and 4 at B = 64 (4,096, 32,768, 294,912, 668,224).
TEST(BatchedPath, FusedChunksGrowWithTheRowsBeforeThem) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const std::int64_t n = 1000000, dim = 8;
  BatchedRun run(random_floats(static_cast<size_t>(n * dim), 812), n, dim, Dtype::kFloat16, false,
                 shuffled_ids(n, 813), limits(1024, 64));
  for (const int batch : {64, 256}) {
    const std::vector<cuda_detail::RowChunk> fused = run.batched().chunks(batch, 10, true);
    const std::vector<cuda_detail::RowChunk> gemm = run.batched().chunks(batch, 10, false);
    std::int64_t next = 0;
    for (const cuda_detail::RowChunk& ch : fused) {
      EXPECT_EQ(ch.row0, next);
      if (next == 0) {
        EXPECT_EQ(ch.rows, batch > 64 ? 8192 : 4096) << "B = " << batch;
      } else {
        EXPECT_LE(ch.rows, 8 * next) << "B = " << batch << ": chunk at row " << ch.row0;
        if (batch > 64)
          EXPECT_LE(ch.rows, std::max<std::int64_t>(196608, next)) << "B = " << batch << ": chunk at row " << ch.row0;
        else if (next + ch.rows < n)
          EXPECT_EQ(ch.rows, 8 * next) << "B = " << batch << ": chunk at row " << ch.row0;
      }
      next += ch.rows;
    }
    EXPECT_EQ(next, n) << "B = " << batch;
    EXPECT_EQ(fused.size(), batch > 64 ? 5u : 4u) << "B = " << batch;
    if (batch == 256) EXPECT_EQ(gemm.size(), 22u);
  }
  // The tile index bounds a chunk only for huge batches.
  EXPECT_EQ(cuda_detail::FusedCollect::max_chunk_rows(1), std::int64_t{1} << 38);
  EXPECT_EQ(cuda_detail::FusedCollect::max_chunk_rows(128), std::int64_t{1} << 38);
  EXPECT_EQ(cuda_detail::FusedCollect::max_chunk_rows(129), std::int64_t{1} << 37);
  EXPECT_EQ(cuda_detail::FusedCollect::max_chunk_rows(65535), std::int64_t{1} << 29);
}

// The shared memory per block the re-score asks of a device (host arithmetic, no GPU needed): the
// final sort's cand_cap (score, id) pairs of 12 bytes beside 24 KiB of its own; k_max = 8,192 (the
// largest: 16,384 pairs) within the 227 KiB of an H100/H200.
TEST(Rescore, SharedMemoryFollowsKMax) {
  using cuda_detail::rescore_smem_bytes;
  EXPECT_EQ(rescore_smem_bytes(limits(8, 100)), 4096u * 12 + 24576);
  EXPECT_EQ(rescore_smem_bytes(limits(8, 2048)), 4096u * 12 + 24576);
  EXPECT_EQ(rescore_smem_bytes(limits(8, 3000)), 8192u * 12 + 24576);
  EXPECT_EQ(rescore_smem_bytes(limits(8, 8192)), 16384u * 12 + 24576);
  EXPECT_LE(rescore_smem_bytes(limits(8, 8192)), 232448u);
}

// Random data: the batched answer equals the batch-1 scan's bit for bit (one arithmetic for
// every batch size, DESIGN.md invariant 3) in batches of 7 and 64 over several chunks, and the
// float64 oracle's within ε; and all queries tied beyond the pools overflow (and nothing else
// of their rows is written) rather than give a wrong answer.
TEST(BatchedPath, SameBitsAsTheScanAndOverflowInsteadOfWrongAnswers) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const std::int64_t n = 70000, dim = 100, nq = 64;
  const int k = 50;
  const std::vector<float> raw = random_floats(static_cast<size_t>(n * dim), 800);
  const std::vector<std::int64_t> ids = shuffled_ids(n, 801);
  const std::vector<float> q = random_floats(static_cast<size_t>(nq * dim), 802);
  for (const Dtype dt : {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16})
    for (const Metric m : {Metric::kInnerProduct, Metric::kL2}) {
      const std::string what = std::string(dname(dt)) + " " + mname(m);
      BatchedRun run(raw, n, dim, dt, m == Metric::kL2, ids, limits(64, 64));
      const std::vector<Candidate> single = run.scan().search(q, nq, k);
      for (const int b : {7, 64}) {
        int fallbacks = 0;
        expect_same_candidates(run.search(q, nq, b, k, &fallbacks), single, what + ": batch " + std::to_string(b));
        EXPECT_EQ(fallbacks, 0) << what << ": random data should not overflow a pool";
      }
      expect_within_tolerance(m, rounded(dt, raw), n, ids.data(), q, nq, dim, k, to_answer(single, m, nq, k, k),
                              what + " vs oracle");
    }
  const std::int64_t tn = 50000, tdim = 8;
  std::vector<float> tied(static_cast<size_t>(tn * tdim), 0.5f);
  const std::vector<float> tq(static_cast<size_t>(4 * tdim), 1.0f);
  BatchedRun run(tied, tn, tdim, Dtype::kFloat32, false, shuffled_ids(tn, 1400), limits(4, 128));
  int fallbacks = 0;
  const std::vector<Candidate> got = run.search(tq, 4, 4, 100, &fallbacks);
  EXPECT_EQ(fallbacks, 4) << "50,000 rows tied: every pool overflows";
  expect_exact_candidates(Metric::kInnerProduct, tied, tn, shuffled_ids(tn, 1400), tq, 4, tdim, 100, got,
                          "all tied, after the fallback");
}

}  // namespace
}  // namespace shardtopk::test
