// kernels/scan_few (the few-query scan + its selects) against the float64 oracle and the batch-1
// scan: exact ids and scores, ties included, on small-integer data (DESIGN.md "exact ids"), and
// the batch-1 scan's bits on random data, for batches of 2 to 8 (the 2-, 4- and 8-query kernels,
// partly filled), every storage type, both metrics.

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "engine/cuda/kernels/scan_few.hpp"

namespace shardtopk::test {
namespace {

/// Queries searched in batches of `batch` through scan_few (the engine's arena layout: scores
/// [batch, rows], one FewQueryState per query, candidates [batch, cap]).
class FewRun {
 public:
  FewRun(const DeviceShard& shard, bool l2, int cap)
      : shard_(shard),
        scan_(cuda_detail::plan_scan_select(shard.dtype, l2, shard.n, shard.dim, shard.dpad, cap, ScanRows::kAuto,
                                            ScanSchedule::kAuto, true, multiprocessors())),
        scores_(static_cast<std::size_t>(shard.n) * cuda_detail::kFewQueries),
        cand_(static_cast<std::size_t>(cap) * cuda_detail::kFewQueries),
        dir_(std::vector<std::uint32_t>{0u}) {
    int device = 0, optin = 0;
    EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
    EXPECT_EQ(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), cudaSuccess);
    few_ = cuda_detail::plan_scan_few(scan_, cuda_detail::kFewQueries, multiprocessors(), static_cast<std::size_t>(optin));
    states_.allocate(sizeof(cuda_detail::FewQueryState) * cuda_detail::kFewQueries);
  }

  /// The largest batch the plan serves on this shard.
  int max_batch() const { return few_.max_batch; }

  /// After search(): the last batch's exact ranking scores [batch, rows] (l2: negated) and each
  /// of its queries' level-1 histograms [batch][kHist1Bins] (the scan's counts of the keys' top
  /// 12 bits, which the select reads and leaves).
  std::vector<float> last_scores(int batch) const {
    std::vector<float> s(static_cast<std::size_t>(batch) * shard_.n);
    EXPECT_EQ(cudaMemcpy(s.data(), scores_.get(), s.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return s;
  }
  std::vector<std::uint32_t> last_histograms(int batch) const {
    std::vector<cuda_detail::FewQueryState> st(static_cast<std::size_t>(batch));
    EXPECT_EQ(cudaMemcpy(st.data(), states_.as<cuda_detail::FewQueryState>(), st.size() * sizeof(st[0]),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    std::vector<std::uint32_t> h;
    for (const auto& q : st) h.insert(h.end(), q.hists, q.hists + cuda_detail::kHist1Bins);
    return h;
  }

  /// Candidates [nq, k] of queries [nq, dim] (float32, host), in batches of `batch` (the last
  /// one shorter when batch does not divide nq; a batch of 1 is not the few-query scan's).
  std::vector<Candidate> search(const std::vector<float>& queries, std::int64_t nq, int k, int batch) {
    DeviceArray<float> q(queries);
    DeviceArray<Candidate> out(static_cast<std::size_t>(nq) * k, 0xFF);
    cuda_detail::ScanFewArgs a;
    a.shard = shard_.rows.get();
    a.ids = shard_.ids.get();
    a.k = k;
    a.scores = scores_.get();
    a.states = states_.as<cuda_detail::FewQueryState>();
    a.cand = cand_.get();
    a.dir = dir_.get();
    for (std::int64_t q0 = 0; q0 < nq; q0 += batch) {
      a.batch = static_cast<int>(std::min<std::int64_t>(batch, nq - q0));
      EXPECT_GE(a.batch, 2) << "the few-query scan serves batches of 2 or more";
      a.queries = q.get() + q0 * shard_.dim;
      a.out = out.get() + q0 * k;
      cuda_detail::scan_few(scan_, few_, a, nullptr);
    }
    return out.download();
  }

 private:
  const DeviceShard& shard_;
  cuda_detail::ScanSelectPlan scan_;
  cuda_detail::ScanFewPlan few_;
  DeviceArray<float> scores_;
  DeviceArray<cuda_detail::PoolEntry> cand_;
  DeviceArray<std::uint32_t> dir_;
  cuda_detail::DeviceBuffer states_;
};

std::vector<SearchCase> exact_cases() {
  return search_cases(
      {
          // n, dim, batch, k, k_max, batch_max   why (8 queries, in batches of `batch`)
          {1, 7, 2, 1, 16, 8},             // N = 1, K = 1
          {5, 33, 4, 10, 16, 8},           // rows < K: the rest is padding
          {3000, 1, 8, 1024, 1024, 8},     // D = 1: five distinct scores, ties everywhere
          {5000, 7, 3, 100, 1024, 8},      // D = 7: a partial 16-byte chunk (the 4-query kernel, 3 used)
          {4100, 784, 8, 50, 1024, 8},     // D = 784: several tiles per step
          {20001, 64, 2, 10, 64, 8},       // a partial last step of rows
          {20000, 33, 5, 3000, 4096, 8},   // K = 3000: the selects' level-2 and level-3 refinements
      },
      {Metric::kInnerProduct, Metric::kL2});
}

class ScanFewExact : public ::testing::TestWithParam<SearchCase> {};

// Small integers in [-2, 2]: every score is exact, so ids must equal the oracle's exactly (ties
// broken on shuffled global ids) and every score the float64 score.
TEST_P(ScanFewExact, IdsAndScoresEqualTheOracle) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const SearchCase& p = GetParam();
  const std::vector<float> rows = small_ints(static_cast<size_t>(p.n * p.dim), 100 + p.n + p.dim, -2, 2);
  const std::vector<std::int64_t> ids = shuffled_ids(p.n, 200 + p.n);
  const DeviceShard shard(rows, p.n, p.dim, p.dtype, ids);
  FewRun run(shard, p.metric == Metric::kL2, cap_for(p.k_max));
  const std::int64_t nq = 8;
  const std::vector<float> q = small_ints(static_cast<size_t>(nq * p.dim), 300 + p.dim, -2, 2);
  expect_exact_candidates(p.metric, rows, p.n, ids, q, nq, p.dim, p.k, run.search(q, nq, p.k, p.batch), p.name());
}

INSTANTIATE_TEST_SUITE_P(Gpu, ScanFewExact, ::testing::ValuesIn(exact_cases()), case_name);

// Random values in [-1, 1): every batch of 2 to 8 gives each query the batch-1 scan's candidates
// bit for bit (the same per-row arithmetic), searched twice (the sweep alternates direction);
// D = 100 (a partial chunk), 200, 768, 1,500; the float64 oracle within ε.
TEST(ScanFew, EveryBatchHasTheBatch1Bits) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const int nq = 8, k = 100;
  for (const auto& [n, dim] : {std::pair<std::int64_t, std::int64_t>{30003, 100}, {20001, 200}, {10007, 768}, {5001, 1500}}) {
    const std::vector<float> raw = random_floats(static_cast<size_t>(n * dim), 2600);
    const std::vector<float> q = random_floats(static_cast<size_t>(nq * dim), 2601);
    const std::vector<std::int64_t> ids = shuffled_ids(n, 2602);
    for (const Dtype t : {Dtype::kFloat16, Dtype::kFloat32, Dtype::kBFloat16})
      for (const bool l2 : {false, true}) {
        const DeviceShard shard(raw, n, dim, t, ids);
        const std::string what = std::string(l2 ? "l2 " : "ip ") + dname(t) + " D=" + std::to_string(dim);
        ScanRun one(shard, l2, cap_for(128));
        const std::vector<Candidate> ref = one.search(q, nq, k);
        expect_within_tolerance(l2 ? Metric::kL2 : Metric::kInnerProduct, rounded(t, raw), n, ids.data(), q, nq, dim,
                                k, to_answer(ref, l2 ? Metric::kL2 : Metric::kInnerProduct, nq, k, k), what + " vs oracle");
        FewRun few(shard, l2, cap_for(128));
        ASSERT_EQ(few.max_batch(), 8) << what;
        for (const int b : {2, 3, 4, 5, 8})
          for (int run = 0; run < 2; ++run)
            expect_same_candidates(few.search(q, nq, k, b), ref,
                                   what + ": batch " + std::to_string(b) + " run " + std::to_string(run));
      }
  }
}

// Each query's level-1 histogram counts every row's score once, in the bin of its key's top 12
// bits (score.cuh's score_key), whatever the block: 10,007 rows (about one step of rows per
// warp) and 100,003 (a partial last step), batches of 2, 3 (the 4-query kernel partly filled), 4
// and 8, both metrics, float16 and float32. A histogram that loses or double-counts rows only widens or
// narrows the select's first threshold, which the answers may survive; this checks the counts.
TEST(ScanFew, LevelOneHistogramsCountEveryScore) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const std::int64_t dim = 768;
  for (const std::int64_t n : {10007, 100003}) {
    const std::vector<float> raw = random_floats(static_cast<size_t>(n * dim), 2700);
    const std::vector<float> q = random_floats(static_cast<size_t>(8 * dim), 2701);
    const std::vector<std::int64_t> ids = shuffled_ids(n, 2702);
    for (const Dtype t : {Dtype::kFloat16, Dtype::kFloat32})
      for (const bool l2 : {false, true}) {
        const DeviceShard shard(raw, n, dim, t, ids);
        FewRun few(shard, l2, cap_for(128));
        for (const int b : {2, 3, 4, 8}) {
          const std::string what = std::string(l2 ? "l2 " : "ip ") + dname(t) + " n=" + std::to_string(n) +
                                   " batch " + std::to_string(b);
          few.search(std::vector<float>(q.begin(), q.begin() + b * dim), b, 10, b);
          const std::vector<float> sc = few.last_scores(b);
          const std::vector<std::uint32_t> h = few.last_histograms(b);
          for (int j = 0; j < b; ++j) {
            std::vector<std::uint32_t> want(cuda_detail::kHist1Bins, 0u);
            for (std::int64_t r = 0; r < n; ++r) ++want[key_of(sc[static_cast<std::size_t>(j * n + r)]) >> 20];
            const std::uint32_t* got = h.data() + static_cast<std::size_t>(j) * cuda_detail::kHist1Bins;
            int wrong_bins = 0;
            for (int i = 0; i < cuda_detail::kHist1Bins; ++i)
              if (got[i] != want[i] && ++wrong_bins <= 3)
                ADD_FAILURE() << what << " query " << j << ": bin " << i << " holds " << got[i] << ", rows in it "
                              << want[i];
            EXPECT_EQ(wrong_bins, 0) << what << " query " << j;
          }
        }
      }
  }
}

}  // namespace
}  // namespace shardtopk::test
