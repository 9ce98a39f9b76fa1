// kernels/scan_select (the batch-1 scan + radix select) against the float64 oracle: exact ids
// and scores, ties included, on small-integer data (DESIGN.md "exact ids"), within ε on random
// data, and the same bits under every scan shape, schedule and direction.

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "cuda_test_support.hpp"

namespace shardtopk::test {
namespace {

using cuda_detail::ScanSelectPlan;

std::vector<SearchCase> exact_cases() {
  return search_cases(
      {
          // n, dim, batch, k, k_max, batch_max   why (3 queries, searched one by one)
          {1, 7, 3, 1, 16, 8},            // N = 1, K = 1
          {37, 3, 3, 37, 64, 8},          // K = N
          {5, 33, 3, 10, 16, 8},          // rows < K: the rest is padding
          {100, 5, 3, 1024, 1024, 8},     // K = 1024 > rows
          {3000, 1, 3, 1024, 1024, 8},    // D = 1: five distinct scores, ties everywhere
          {5000, 7, 3, 100, 1024, 8},     // D = 7: a partial 16-byte chunk
          {2500, 100, 3, 1, 1024, 8},     // D = 100, K = 1
          {4100, 784, 3, 50, 1024, 8},    // D = 784: several chunks per lane
          {20000, 64, 3, 10, 64, 8},      // 16 lanes per row (float16: 8 chunks; float32: 16)
          {20000, 200, 3, 10, 64, 8},     // 8 rows x 1 chunk (float16) / 4 x 2 (float32)
          {20000, 384, 3, 10, 64, 8},     // 4 x 2 (float16) / 2 x 4 (float32)
          {6000, 1500, 3, 20, 64, 8},     // 2 x 4, several passes of the chunk loop
          {20000, 33, 3, 3000, 4096, 8},  // K = 3000: level-2 and level-3 refinements
          {30000, 3, 3, 8000, 8192, 8},   // K = 8000 = cap / 2, 25 distinct scores
      },
      {Metric::kInnerProduct, Metric::kL2});
}

class ScanSelectExact : public ::testing::TestWithParam<SearchCase> {};

// Small integers in [-2, 2]: every score is exact in float32 and every value exact in float16
// and bfloat16, so ids must equal the oracle's exactly, ties broken on shuffled global ids,
// and every score must equal the float64 score.
TEST_P(ScanSelectExact, IdsAndScoresEqualTheOracle) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const SearchCase& p = GetParam();
  const std::vector<float> rows = small_ints(static_cast<size_t>(p.n * p.dim), 100 + p.n + p.dim, -2, 2);
  const std::vector<std::int64_t> ids = shuffled_ids(p.n, 200 + p.n);
  const DeviceShard shard(rows, p.n, p.dim, p.dtype, ids);
  ScanRun run(shard, p.metric == Metric::kL2, cap_for(p.k_max));
  const std::int64_t nq = p.batch;
  const std::vector<float> q = small_ints(static_cast<size_t>(nq * p.dim), 300 + p.dim, -2, 2);
  expect_exact_candidates(p.metric, rows, p.n, ids, q, nq, p.dim, p.k, run.search(q, nq, p.k), p.name());
}

INSTANTIATE_TEST_SUITE_P(Gpu, ScanSelectExact, ::testing::ValuesIn(exact_cases()), case_name);

// More rows tie at the k-th score than the final sort holds (cap): the slow path collects the
// tied rows' ids by streaming over the scores. Every row equal but 40: the answer is those 40
// and then the smallest ids of the tie.
TEST(ScanSelect, MassiveTiesTakeTheSmallestIds) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const std::int64_t n = 50000, dim = 8;
  const int k = 100;
  std::vector<float> rows(static_cast<size_t>(n * dim), 0.5f);
  for (std::int64_t r = 0; r < 40; ++r) rows[(r * 997) * dim] = 2.0f;
  const std::vector<std::int64_t> ids = shuffled_ids(n, 1400);
  const std::vector<float> q(static_cast<size_t>(2 * dim), 1.0f);
  for (Dtype dt : {Dtype::kFloat32, Dtype::kFloat16}) {
    const DeviceShard shard(rows, n, dim, dt, ids);
    ScanRun run(shard, false, cap_for(128));
    expect_exact_candidates(Metric::kInnerProduct, rows, n, ids, q, 2, dim, k, run.search(q, 2, k),
                            std::string("massive ties ") + dname(dt));
  }
}

// The selection's refinement levels wait until every row has been counted, by whichever blocks;
// no block may wait for a block that has not started. Grids of one block, of a few, and of many
// waves (most blocks cannot start until others have exited) give the oracle's answer, bit for bit
// the plan's grid's: small integers with K = 3000 (levels 2 and 3, ties everywhere), and random
// values in [0.9, 1) (every score in one or two level-1 bins: level 2 over every row).
TEST(ScanSelect, SelectionIsCorrectOnAnyGrid) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const int nq = 3, many_waves = 8 * multiprocessors();
  struct Data {
    std::int64_t n, dim;
    int k;
    bool exact;
  };
  for (const Data& d : {Data{20000, 33, 3000, true}, Data{100000, 64, 1000, false}}) {
    const std::vector<float> rows = d.exact ? small_ints(static_cast<size_t>(d.n * d.dim), 1700, -2, 2)
                                            : random_floats(static_cast<size_t>(d.n * d.dim), 1701, 0.9f, 1.0f);
    const std::vector<float> q = d.exact ? small_ints(static_cast<size_t>(nq * d.dim), 1702, -2, 2)
                                         : random_floats(static_cast<size_t>(nq * d.dim), 1703, 0.9f, 1.0f);
    const std::vector<std::int64_t> ids = shuffled_ids(d.n, 1704);
    for (const Dtype t : {Dtype::kFloat32, Dtype::kFloat16}) {
      const DeviceShard shard(rows, d.n, d.dim, t, ids);
      const std::string what = std::string(d.exact ? "small integers " : "random ") + dname(t);
      ScanRun run(shard, false, cap_for(4096));
      const std::vector<Candidate> ref = run.search(q, nq, d.k);
      if (d.exact) {
        expect_exact_candidates(Metric::kInnerProduct, rows, d.n, ids, q, nq, d.dim, d.k, ref, what);
      } else {
        expect_within_tolerance(Metric::kInnerProduct, rounded(t, rows), d.n, ids.data(), q, nq, d.dim, d.k,
                                to_answer(ref, Metric::kInnerProduct, nq, d.k, d.k), what);
      }
      for (const int blocks : {1, 3, many_waves}) {
        run.set_select_blocks(blocks);
        expect_same_candidates(run.search(q, nq, d.k), ref, what + ", select grid of " + std::to_string(blocks));
      }
    }
  }
}

// Every scan shape (rows per warp), schedule (persistent grid; blocks of 1,024 rows) and
// direction (forward with plain loads; alternating with L2 hints, each query searched once in
// each direction) scores every row with the same arithmetic: the same candidates bit for bit,
// and the float64 oracle's answer within ε. Random values in [-1, 1); D = 100 with a partial
// last chunk and block (100,003 rows), 64, 200, 384 (each shape's upper bound for float16),
// 768, 1,500.
TEST(ScanSelect, ShapesSchedulesAndDirectionsAgreeBitForBit) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const int nq = 3, k = 100;
  for (const auto& [n, dim] : {std::pair<std::int64_t, std::int64_t>{100003, 100},
                               {50001, 64},
                               {30001, 200},
                               {40001, 384},
                               {20003, 768},
                               {5001, 1500}}) {
    const std::vector<float> raw = random_floats(static_cast<size_t>(n * dim), 1600);
    const std::vector<float> q = random_floats(static_cast<size_t>(nq * dim), 1601);
    const std::vector<std::int64_t> ids = shuffled_ids(n, 1602);
    for (const Dtype t : {Dtype::kFloat16, Dtype::kFloat32, Dtype::kBFloat16}) {
      const DeviceShard shard(raw, n, dim, t, ids);
      const std::vector<float> stored = rounded(t, raw);
      for (const Metric m : {Metric::kInnerProduct, Metric::kL2}) {
        const std::string what = std::string(mname(m)) + " " + dname(t) + " D=" + std::to_string(dim);
        std::vector<Candidate> ref;
        for (int variant = 0; variant < 8; ++variant) {
          const bool blocked = variant & 1, alternate = variant & 2, two_rows = variant & 4;
          ScanRun run(shard, m == Metric::kL2, cap_for(128), two_rows ? ScanRows::kTwo : ScanRows::kAuto,
                      blocked ? ScanSchedule::kBlocked : ScanSchedule::kPersistent, alternate);
          const std::string v = what + (blocked ? " blocked" : " persistent") +
                                (alternate ? " alternating" : " forward") + (two_rows ? " 2 rows per warp" : "");
          EXPECT_EQ(run.plan().rows_per_block, blocked ? 1024 : 0) << v;
          for (int pass = 0; pass < (alternate ? 2 : 1); ++pass) {
            const std::vector<Candidate> got = run.search(q, nq, k);
            if (ref.empty()) {
              ref = got;
              expect_within_tolerance(m, stored, n, ids.data(), q, nq, dim, k, to_answer(got, m, nq, k, k),
                                      v + " vs oracle");
            } else {
              expect_same_candidates(got, ref, v + " pass " + std::to_string(pass) + " vs persistent forward");
            }
          }
        }
      }
    }
  }
}

// The plan's choices: the shape table by row width, and the schedule (blocks of 1,024 rows
// from 8 waves of them on, or forced).
TEST(ScanSelect, PlanFollowsTheShapeAndScheduleTables) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const int sms = multiprocessors();
  auto plan = [&](Dtype dt, std::int64_t rows, std::int64_t dim, ScanSchedule s) {
    return cuda_detail::plan_scan_select(dt, false, rows, dim, cuda_detail::padded_dim(dim, dt), 4096, ScanRows::kAuto,
                                         s, true, sms);
  };
  EXPECT_EQ(plan(Dtype::kFloat16, 1000, 768, ScanSchedule::kAuto).nvec, 96);
  EXPECT_EQ(plan(Dtype::kFloat32, 1000, 1, ScanSchedule::kAuto).nvec, 1);
  EXPECT_EQ(plan(Dtype::kFloat16, 1000, 768, ScanSchedule::kAuto).rows_per_block, 0) << "small shard: persistent";
  EXPECT_EQ(plan(Dtype::kFloat16, 1000, 768, ScanSchedule::kBlocked).rows_per_block, 1024);
  EXPECT_EQ(plan(Dtype::kFloat16, 1000, 768, ScanSchedule::kBlocked).scan_blocks, 1);
  const ScanSelectPlan big = plan(Dtype::kFloat16, 20000000, 128, ScanSchedule::kAuto);
  EXPECT_EQ(big.rows_per_block, 1024) << "20M rows: far beyond 8 waves of 1,024-row blocks";
  EXPECT_EQ(plan(Dtype::kFloat16, 20000000, 128, ScanSchedule::kPersistent).rows_per_block, 0);
  // the last ~32 MiB of rows are loaded evict-normal
  EXPECT_EQ(big.keep_from, 20000000 - (32ll << 20) / (128 * 2));
}

}  // namespace
}  // namespace shardtopk::test
