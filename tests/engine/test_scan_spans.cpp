// The rows a filtered batch makes a host engine scan (src/engine/cpu/scan_spans.hpp): the runs of
// summary blocks some query may return a row of (a block every query's filter rules out is not
// scanned; one unfiltered query scans everything), and their split among threads (every row in
// exactly one thread's pieces, cuts on the alignment).
#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

#include "engine/cpu/scan_spans.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk::engine_detail {
namespace {

constexpr std::int64_t B = kFilterBlockRows;

using Pairs = std::vector<std::pair<std::int64_t, std::int64_t>>;
Pairs pairs(const std::vector<RowRange>& v) {
  Pairs out;
  for (const RowRange& r : v) out.emplace_back(r.lo, r.hi);
  return out;
}

TEST(ScanSpans, RunsOfTheBlocksSomeQueryMayReturn) {
  const std::int64_t blocks = 10, rows = 9 * B + 100;  // the last block is partial
  // program 0: blocks 1, 2, 5; program 1: blocks 2, 3, 9; program 2: none
  std::vector<std::uint8_t> flags(3 * blocks, 0);
  for (int b : {1, 2, 5}) flags[b] = 1;
  for (int b : {2, 3, 9}) flags[blocks + b] = 2;
  const std::vector<std::int32_t> q01 = {0, 1, 1, 0}, q0 = {0}, q2 = {2, 2}, with_none = {2, -1, 0};
  EXPECT_EQ(pairs(scan_spans(flags.data(), blocks, q01.data(), 4, rows)),
            (Pairs{{B, 4 * B}, {5 * B, 6 * B}, {9 * B, rows}}));
  EXPECT_EQ(pairs(scan_spans(flags.data(), blocks, q0.data(), 1, rows)), (Pairs{{B, 3 * B}, {5 * B, 6 * B}}));
  EXPECT_TRUE(scan_spans(flags.data(), blocks, q2.data(), 2, rows).empty());
  EXPECT_EQ(pairs(scan_spans(flags.data(), blocks, with_none.data(), 3, rows)), (Pairs{{0, rows}}));
  EXPECT_TRUE(scan_spans(flags.data(), blocks, with_none.data(), 3, 0).empty());
}

TEST(ScanSpans, ThreadPiecesCoverEveryRowOnceOnAlignedCuts) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<RowRange> spans;
    std::int64_t at = 0;
    const int n = static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) {
      at += static_cast<std::int64_t>(rng() % 3) * B;
      const std::int64_t len = static_cast<std::int64_t>(1 + rng() % 4) * B - (i + 1 == n ? static_cast<std::int64_t>(rng() % B) : 0);
      spans.push_back({at, at + len});
      at += len + B;
    }
    const int threads = static_cast<int>(1 + rng() % 9);
    std::vector<int> seen(static_cast<size_t>(at + 1), 0);
    for (int t = 0; t < threads; ++t)
      for (const RowRange& p : thread_pieces(spans, threads, t, 16)) {
        ASSERT_LT(p.lo, p.hi);
        ASSERT_EQ(p.lo % 16, 0) << "trial " << trial;
        for (std::int64_t r = p.lo; r < p.hi; ++r) ++seen[static_cast<size_t>(r)];
      }
    for (std::int64_t r = 0; r <= at; ++r) {
      bool in = false;
      for (const RowRange& s : spans) in = in || (r >= s.lo && r < s.hi);
      ASSERT_EQ(seen[static_cast<size_t>(r)], in ? 1 : 0) << "trial " << trial << " row " << r;
    }
  }
}

}  // namespace
}  // namespace shardtopk::engine_detail
