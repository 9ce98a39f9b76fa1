// GPU tests of the CUDA engine against the CPU engine and itself: the same answers as the CPU
// engine (within ε; bit identity is not required between backends), the same bits alone and in
// batches, the batched path's candidate bound at near ties and extreme norms, massive ties, scan
// options, generated shards.
//
// Every test skips, saying so, when no GPU is visible. Under `mpirun -np P` each rank runs the
// whole binary on GPU (local rank mod GPU count); nothing here talks between ranks.
//
// Case tables (why each row exists) are next to the INSTANTIATE_TEST_SUITE_P lines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_engine_rig.hpp"
#include "engine_test_support.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/generator.hpp"
#include "shardtopk/space.hpp"
#include "test_support.hpp"
#include "tools/oracle.hpp"

namespace shardtopk::test {
namespace {

class CudaVsCpu : public ::testing::TestWithParam<DtypeMetric> {};

// Between backends bit identity is not required (DESIGN.md invariant 3): the CUDA engine has its
// own fixed order (score.cuh). Ids must agree except near-ties, and scores within ε.
TEST_P(CudaVsCpu, SameAnswers) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const DtypeMetric& p = GetParam();
  for (std::int64_t dim : {100LL, 37LL}) {
    const std::int64_t n = 6000, nq = 16;
    const int k = 100;
    const std::string what = p.name() + "_d" + std::to_string(dim);
    const Corpus c = make_corpus(random_floats(static_cast<size_t>(n * dim), 700 + dim), n, dim, p.metric, p.dtype,
                                 shuffled_ids(n, 701));
    Rig gpu = make_rig(c.input(), p.metric, p.dtype, limits(16, 128));
    EngineOptions cpu_opt;
    cpu_opt.threads = 2;
    auto cpu = make_cpu_engine(c.input(), p.metric, p.dtype, limits(16, 128), cpu_opt);
    const std::vector<float> q = random_floats(static_cast<size_t>(nq * dim), 702);
    const Answer g = to_answer(run_candidates(gpu, q, nq, k, 16), p.metric, nq, k, k);
    const Answer h = run_engine(*cpu, q, nq, k, 16);
    // ids equal except near-ties within ε
    int differing = 0;
    for (std::int64_t qi = 0; qi < nq; ++qi) {
      const double eps = oracle::epsilon(h.scores[qi * k], h.scores[qi * k + k - 1]);
      for (int j = 0; j < k; ++j) {
        const std::int64_t i = qi * k + j;
        if (g.ids[i] == h.ids[i]) continue;
        ++differing;
        EXPECT_LE(std::fabs(static_cast<double>(g.scores[i]) - h.scores[i]), eps)
            << what << ": query " << qi << " rank " << j << " ids differ beyond a near-tie";
      }
    }
    std::printf("  [%s] GPU vs CPU: %d of %lld ids differ (near-ties)\n", what.c_str(), differing,
                static_cast<long long>(nq * k));
    for (std::int64_t i = 0; i < nq * k; ++i) {
      const double eps = oracle::epsilon(h.scores[(i / k) * k], h.scores[(i / k) * k + k - 1]);
      EXPECT_LE(std::fabs(static_cast<double>(g.scores[i]) - h.scores[i]), eps) << what << ": slot " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Gpu, CudaVsCpu, ::testing::ValuesIn(dtype_metrics()),
                         [](const ::testing::TestParamInfo<DtypeMetric>& i) { return i.param.name(); });

class BatchIndependence : public ::testing::TestWithParam<DtypeMetric> {};

// A query's ids and score bits do not depend on the batch it came in (DESIGN.md invariant 3):
// alone (the batch-1 scan), and in batches of 2, 7, 64 and 256 (the tensor-core path: several
// chunks of rows at 64 and 256), at every position of a batch of 7. 70,000 rows so that the
// batched path runs over several chunks.
TEST_P(BatchIndependence, SameBitsAloneAndInBatches) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const DtypeMetric& p = GetParam();
  const std::int64_t n = 70000, dim = 100, nq = 256;
  const int k = 50;
  const Corpus c = make_corpus(random_floats(static_cast<size_t>(n * dim), 800), n, dim, p.metric, p.dtype,
                               shuffled_ids(n, 801));
  Rig e = make_rig(c.input(), p.metric, p.dtype, limits(256, 64));
  const std::vector<float> q = random_floats(static_cast<size_t>(nq * dim), 802);
  const auto single = run_candidates(e, q, nq, k, 1);
  for (int b : {2, 7, 64, 256})
    expect_same_candidates(run_candidates(e, q, nq, k, b), single,
                           p.name() + ": batch " + std::to_string(b) + " vs alone");
  // one query at every position of a batch of 7 whose other queries change
  const std::int64_t probe = 5;
  for (int pos = 0; pos < 7; ++pos) {
    std::vector<float> batch = random_floats(static_cast<size_t>(7 * dim), 900 + pos);
    std::copy(q.begin() + probe * dim, q.begin() + (probe + 1) * dim, batch.begin() + pos * dim);
    const auto got = run_candidates(e, batch, 7, k, 7);
    const std::vector<Candidate> mine(got.begin() + pos * k, got.begin() + (pos + 1) * k);
    const std::vector<Candidate> want(single.begin() + probe * k, single.begin() + (probe + 1) * k);
    expect_same_candidates(mine, want, p.name() + ": position " + std::to_string(pos) + " of 7");
  }
  expect_within_tolerance(oracle_metric(p.metric), c.stored, c.n, c.ids.data(), prepared(q, 8, dim, p.metric), 8, dim,
                          k, to_answer(std::vector<Candidate>(single.begin(), single.begin() + 8 * k), p.metric, 8, k, k),
                          p.name() + " vs oracle");
}

INSTANTIATE_TEST_SUITE_P(Gpu, BatchIndependence, ::testing::ValuesIn(dtype_metrics()),
                         [](const ::testing::TestParamInfo<DtypeMetric>& i) { return i.param.name(); });

// Batches of 2 to 8 take one pass over the shard for all their queries (scan_few): each query's
// ids and score bits are its batch-1 search's, in batches of every size 2 … 8 (3, 5, 6 and 7 fill
// part of the 4- or 8-query kernel; 23 queries end on a partial batch), for short rows (D = 37:
// 10 or 5 chunks of 16 bytes) and long ones (D = 768), a shard of fewer rows than k (padding),
// and rows tied across the k-th (every row from n / 2 on repeats one of 61 rows); searched twice
// in a row (the sweep alternates its direction); the tensor-core path (forced) gives the same
// bits; the float64 oracle within ε.
TEST_P(BatchIndependence, FewQueriesSameBitsAsAlone) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const DtypeMetric& p = GetParam();
  const std::int64_t nq = 23;
  const int k = 100;
  for (const auto& [n, dim] : {std::pair<std::int64_t, std::int64_t>{30011, 37}, {9001, 768}, {60, 100}}) {
    std::vector<float> raw = random_floats(static_cast<size_t>(n * dim), 1900 + dim);
    for (std::int64_t r = n / 2; r < n; ++r)
      std::copy(raw.begin() + (r % 61) * dim, raw.begin() + (r % 61 + 1) * dim, raw.begin() + r * dim);
    const Corpus c = make_corpus(raw, n, dim, p.metric, p.dtype, shuffled_ids(n, 1901));
    const std::string what = p.name() + " n=" + std::to_string(n) + " D=" + std::to_string(dim);
    Rig e = make_rig(c.input(), p.metric, p.dtype, limits(8, 128));
    const std::vector<float> q = random_floats(static_cast<size_t>(nq * dim), 1902);
    const auto single = run_candidates(e, q, nq, k, 1);
    for (int b = 2; b <= 8; ++b)
      for (int run = 0; run < 2; ++run)
        expect_same_candidates(run_candidates(e, q, nq, k, b), single,
                               what + ": batch " + std::to_string(b) + " run " + std::to_string(run) + " vs alone");
    EngineOptions gemm;
    gemm.search_path = SearchPath::kGemm;
    Rig g = make_rig(c.input(), p.metric, p.dtype, limits(8, 128), gemm);
    expect_same_candidates(run_candidates(g, q, nq, k, 5), single, what + ": tensor-core path vs alone");
    const int kk = static_cast<int>(std::min<std::int64_t>(k, n));
    expect_within_tolerance(oracle_metric(p.metric), c.stored, c.n, c.ids.data(), prepared(q, nq, dim, p.metric), nq,
                            dim, kk, to_answer(single, p.metric, nq, k, kk), what + " vs oracle");
    expect_padding(single, nq, k, kk, what);
  }
}

class CandidateBound : public ::testing::TestWithParam<DtypeMetric> {};

/// Rows [n, dim] = ±(base + eps · noise) (base, noise uniform in [-1, 1] from seeds seed and
/// seed + 1; every 3rd row negated), every `every`-th row scaled by `scale`; *base_out = base.
std::vector<float> near_tie_rows(std::int64_t n, std::int64_t dim, std::uint64_t seed, float eps, int every,
                                 float scale, std::vector<float>* base_out) {
  *base_out = random_floats(static_cast<size_t>(dim), seed);
  const std::vector<float>& base = *base_out;
  const std::vector<float> noise = random_floats(static_cast<size_t>(n * dim), seed + 1);
  std::vector<float> raw(static_cast<size_t>(n * dim));
  for (std::int64_t r = 0; r < n; ++r) {
    const float sign = (r % 3 == 0) ? -1.0f : 1.0f;
    const float s = (r % every == 0) ? scale : 1.0f;
    for (std::int64_t d = 0; d < dim; ++d) raw[r * dim + d] = s * sign * (base[d] + eps * noise[r * dim + d]);
  }
  return raw;
}

/// Queries [nq, dim] = ±(base + 1e-2 · noise) (noise uniform in [-1, 1] from `seed`; odd queries
/// negated): every query near the rows of near_tie_rows, so their scores crowd the k-th.
std::vector<float> near_base_queries(const std::vector<float>& base, std::int64_t nq, std::int64_t dim,
                                     std::uint64_t seed) {
  std::vector<float> q(static_cast<size_t>(nq * dim));
  const std::vector<float> qn = random_floats(static_cast<size_t>(nq * dim), seed);
  for (std::int64_t i = 0; i < nq; ++i)
    for (std::int64_t d = 0; d < dim; ++d) q[i * dim + d] = (i % 2 ? -1.0f : 1.0f) * (base[d] + 1e-2f * qn[i * dim + d]);
  return q;
}

/// Queries [nq, dim] searched one by one and in each of `batches`: the same bits, and the
/// float64 oracle's answer within ε.
void expect_batches_match_alone_and_oracle(Rig& e, const Corpus& c, Metric m, const std::vector<float>& q,
                                           std::int64_t nq, int k, std::initializer_list<int> batches,
                                           const std::string& what) {
  const auto single = run_candidates(e, q, nq, k, 1);
  for (const int b : batches)
    expect_same_candidates(run_candidates(e, q, nq, k, b), single, what + ": batch " + std::to_string(b) + " vs batch 1");
  expect_within_tolerance(oracle_metric(m), c.stored, c.n, c.ids.data(), prepared(q, nq, c.dim, m), nq, c.dim, k,
                          to_answer(single, m, nq, k, k), what + " vs oracle");
}

// Adversarial inputs for the batched path's candidate bound (docs/EXACTNESS.md): rows that are one base
// vector plus tiny perturbations, so hundreds of scores crowd the k-th within the filter's
// margin; large norms (×1000) and mixed signs. The batched answer must equal the batch-1 scan's
// bit for bit and be within ε of the float64 oracle.
TEST_P(CandidateBound, NearTiesLargeNormsMixedSigns) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const DtypeMetric& p = GetParam();
  const std::int64_t n = 20000, dim = 96, nq = 8;
  const int k = 100;
  std::vector<float> base;
  const std::vector<float> raw = near_tie_rows(n, dim, 1300, 1e-3f, 7, 1000.0f, &base);
  const Corpus c = make_corpus(raw, n, dim, p.metric, p.dtype, shuffled_ids(n, 1302));
  Rig e = make_rig(c.input(), p.metric, p.dtype, limits(8, 128));
  const std::vector<float> q = near_base_queries(base, nq, dim, 1303);
  expect_batches_match_alone_and_oracle(e, c, p.metric, q, nq, k, {8}, p.name());
}

// The batched GEMM of float16 shards writes __half (largest finite value 65,504). The engine
// scales each query so that no output can overflow (an inf would flood the candidate pool and
// push the query onto the batch-1 fallback) and charges the output's rounding to Δ. Rows with
// elements near half's range and queries from 1e-30 to 1e30 (‖q‖ · max‖x‖ up to ~1e35, near the
// admission bound FLT_MAX / 2; l2 up to 1e15 so that (‖q‖ + max‖x‖)² stays admissible) must give
// the batch-1 bits and the oracle's answer for every storage type and metric, and no fallback for
// inner product (without the scale cap, float16's outputs overflow and all of them fall back).
TEST_P(CandidateBound, ExtremeNormsNeitherOverflowNorFallBack) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const DtypeMetric& p = GetParam();
  const std::int64_t n = 20000, dim = 96, nq = 6;
  const int k = 50;
  std::vector<float> base;
  const std::vector<float> raw = near_tie_rows(n, dim, 1310, 1e-2f, 5, 2.0e4f, &base);  // elements up to ~2e4
  const Corpus c = make_corpus(raw, n, dim, p.metric, p.dtype, shuffled_ids(n, 1312));
  Rig e = make_rig(c.input(), p.metric, p.dtype, limits(8, 128));
  const float big = p.metric == Metric::kL2 ? 1e15f : 1e30f;
  const float qscale[nq] = {big, -big, 1.0f, -1.0f, 1e-30f, -1e-30f};
  std::vector<float> q(static_cast<size_t>(nq * dim));
  const std::vector<float> qn = random_floats(static_cast<size_t>(nq * dim), 1313);
  for (std::int64_t i = 0; i < nq; ++i)
    for (std::int64_t d = 0; d < dim; ++d) q[i * dim + d] = qscale[i] * (base[d] + 1e-1f * qn[i * dim + d]);
  e->reset_transfer_counters();
  expect_batches_match_alone_and_oracle(e, c, p.metric, q, nq, k, {static_cast<int>(nq)}, p.name());
  // Inner product only: cosine normalises both sides (no extreme norms remain, and its rows all
  // point one way, so they flood the pool), and for l2 a query norm of 1e15 puts every distance
  // within Δ of the k-th (u · ‖q‖² ≫ the spread 2 ‖q‖ · ‖x‖): the fallback is the right answer.
  if (p.metric == Metric::kInnerProduct) {
    EXPECT_EQ(e->transfer_counters().batched_fallbacks, 0u)
        << p.name() << ": a query left the batched path (an output overflowed or the pool flooded)";
  }
}

// Chunk shapes the sizes above never make: a shard of 37 rows (the first chunk only), 8,192 + 37
// rows (a 37-row second chunk: cuBLAS splits such a GEMM over d and, with float16 output, rounds
// each partial sum to float16, which Δ charges; and the filter's scalar path, 37 not being a
// multiple of its 8-value loads) and 20,003 rows (an 11,811-row last chunk), at D = 768 with near-tied
// rows, batches of 64 and 8: batched equals batch 1 bit for bit and the float64 oracle.
TEST_P(CandidateBound, OddChunkShapesSmallShardsAndTails) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const DtypeMetric& p = GetParam();
  const std::int64_t dim = 768, nq = 64;
  const int k = 10;
  for (const std::int64_t n : {std::int64_t{37}, std::int64_t{8192 + 37}, std::int64_t{20003}}) {
    std::vector<float> base;
    const std::vector<float> raw = near_tie_rows(n, dim, 1320, 1e-3f, 7, 1000.0f, &base);
    const Corpus c = make_corpus(raw, n, dim, p.metric, p.dtype, shuffled_ids(n, 1322));
    Rig e = make_rig(c.input(), p.metric, p.dtype, limits(64, 16));
    const std::vector<float> q = near_base_queries(base, nq, dim, 1323);
    expect_batches_match_alone_and_oracle(e, c, p.metric, q, nq, k, {64, 8}, p.name() + " n=" + std::to_string(n));
  }
}

INSTANTIATE_TEST_SUITE_P(Gpu, CandidateBound, ::testing::ValuesIn(dtype_metrics()),
                         [](const ::testing::TestParamInfo<DtypeMetric>& i) { return i.param.name(); });

// More rows tie at the k-th score than the final sort holds (the batch-1 slow path, the
// few-query scan's selects, which share it, and the tensor-core path's fallback to it): every
// row equal, so the answer is the k smallest ids.
TEST(CudaEngine, MassiveTiesTakeTheSmallestIds) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const std::int64_t n = 50000, dim = 8;
  const int k = 100;
  std::vector<float> raw(static_cast<size_t>(n * dim), 0.5f);
  for (std::int64_t r = 0; r < 40; ++r) raw[(r * 997) * dim] = 2.0f;  // 40 rows above the tie
  const Corpus c = make_corpus(raw, n, dim, Metric::kInnerProduct, Dtype::kFloat32, shuffled_ids(n, 1400));
  Rig few = make_rig(c.input(), Metric::kInnerProduct, Dtype::kFloat32, limits(4, 128));
  EngineOptions gemm;
  gemm.search_path = SearchPath::kGemm;
  Rig e = make_rig(c.input(), Metric::kInnerProduct, Dtype::kFloat32, limits(4, 128), gemm);
  const std::vector<float> q(static_cast<size_t>(4 * dim), 1.0f);
  for (Rig* r : {&few, &e})
    for (int b : {1, 4}) {
      const auto got = run_candidates(*r, q, 4, k, b);
      expect_exact(Metric::kInnerProduct, c.stored, c.n, c.ids.data(), q, 4, dim, k,
                   to_answer(got, Metric::kInnerProduct, 4, k, k),
                   std::string(r == &e ? "tensor-core path" : "default path") + ", massive ties, batch " +
                       std::to_string(b));
    }
  // A search with an epilogue (the one-rank index's export) queues it inside the batched path's
  // graph, before the overflow check; here every pool overflows, so the epilogue must be queued
  // again after the fallback: the exported ids and scores equal the listed candidates, not the
  // overflowed pools'. Twice: on the graph's capture and on its replay.
  const std::uint64_t fallbacks = e->transfer_counters().batched_fallbacks;
  EXPECT_GT(fallbacks, 0u) << "the tied rows were meant to overflow the batched pools";
  const std::vector<Candidate> listed = run_candidates(e, q, 4, k, 4);
  const Answer want = to_answer(listed, Metric::kInnerProduct, 4, k, k);
  SplitEpilogue ep(*e.space, Metric::kInnerProduct, 4, k);
  for (int rep = 0; rep < 2; ++rep) {
    stage(e, q.data(), 4);
    search(e, 4, k, &ep);
    e.space->synchronize();
    const Answer got = ep.read(4, k);
    EXPECT_EQ(got.ids, want.ids) << "call " << rep;
    EXPECT_EQ(got.scores, want.scores) << "call " << rep;
  }
  EXPECT_GE(e->transfer_counters().batched_fallbacks, fallbacks + 12) << "the searches with an epilogue fell back";
}

// The batch-1 scan's options reach it through EngineOptions and change no bit: the schedule
// (a persistent grid striding over the shard; blocks of 1,024 contiguous rows), the direction
// (forward with plain loads; alternating between searches with L2 hints: with three queries run
// twice, each query is searched once in each direction) and the rows per warp (the width's
// shape; 2 rows of 32 lanes at every width): the same candidates bit for bit, and the float64
// oracle's answer. D = 100 (a partial last chunk; 300,001 rows: a partial last block and an
// unpaired last row) and 768; every storage type, both metrics. (test_scan_select covers every
// shape at the launcher.)
TEST(CudaEngine, ScanOptionsChangeNoBits) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const int nq = 3, k = 100;
  for (const auto& [n, dim] : {std::pair<std::int64_t, std::int64_t>{300001, 100}, {20003, 768}}) {
    const std::vector<float> raw = random_floats(static_cast<size_t>(n * dim), 1600);
    const std::vector<float> q = random_floats(static_cast<size_t>(nq * dim), 1601);
    for (const Dtype t : {Dtype::kFloat16, Dtype::kFloat32, Dtype::kBFloat16})
      for (const Metric m : {Metric::kInnerProduct, Metric::kL2}) {
        const Corpus c = make_corpus(raw, n, dim, m, t, shuffled_ids(n, 1602));
        const std::string what = std::string(mname(m)) + " " + dname(t) + " D=" + std::to_string(dim);
        std::vector<Candidate> ref;
        for (int variant = 0; variant < 6; ++variant) {
          const bool blocked = variant & 1, alternate = variant & 2, two_rows = variant & 4;
          EngineOptions opt;
          opt.scan_schedule = blocked ? ScanSchedule::kBlocked : ScanSchedule::kPersistent;
          opt.scan_rows = two_rows ? ScanRows::kTwo : ScanRows::kAuto;
          opt.scan_l2_hints = alternate;
          Rig e = make_rig(c.input(), m, t, limits(4, 128), opt);
          const std::string v = what + (blocked ? " blocked" : " persistent") + (alternate ? " alternating" : " forward") +
                                (two_rows ? " 2 rows per warp" : "");
          for (int run = 0; run < (alternate ? 2 : 1); ++run) {
            const std::vector<Candidate> got = run_candidates(e, q, nq, k, 1);
            if (ref.empty()) {
              ref = got;
              expect_within_tolerance(oracle_metric(m), c.stored, c.n, c.ids.data(), prepared(q, nq, dim, m), nq,
                                      dim, k, to_answer(got, m, nq, k, k), v + " vs oracle");
            } else {
              expect_same_candidates(got, ref, v + " run " + std::to_string(run) + " vs persistent forward");
            }
          }
        }
      }
  }
}

// A generated shard (made on the device) equals the same rows generated on the host.
TEST(CudaEngine, GeneratedShardEqualsHostRows) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const std::int64_t n = 5000, dim = 77, first = 123456;
  for (Metric m : {Metric::kInnerProduct, Metric::kCosine}) {
    std::vector<float> raw(static_cast<size_t>(n * dim));
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t d = 0; d < dim; ++d) raw[r * dim + d] = generated_value(42, first + r, d);
    std::vector<std::int64_t> ids(static_cast<size_t>(n));
    std::iota(ids.begin(), ids.end(), first);
    const Corpus c = make_corpus(raw, n, dim, m, Dtype::kFloat16, ids);
    ShardInput gen;
    gen.rows = n;
    gen.dim = dim;
    gen.generated = true;
    gen.seed = 42;
    gen.first_row = first;
    Rig a = make_rig(c.input(), m, Dtype::kFloat16, limits(4, 32));
    Rig b = make_rig(gen, m, Dtype::kFloat16, limits(4, 32));
    const std::vector<float> q = random_floats(static_cast<size_t>(4 * dim), 1500);
    expect_same_candidates(run_candidates(a, q, 4, 32, 4), run_candidates(b, q, 4, 32, 4),
                           std::string("generated vs host rows ") + mname(m));
  }
}

}  // namespace
}  // namespace shardtopk::test
