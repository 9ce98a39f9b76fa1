// kernels/merge: the device k-way merge. The float64 oracle's top-k of each part of a corpus,
// merged, is the oracle's top-k of the whole corpus (exact on small integers, ties broken on
// global ids); and on arbitrary sorted lists (random, all equal, three values; padding) the
// merge equals the ordering rule's best k of their union, bit for bit.

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "engine/cuda/kernels/merge.hpp"
#include "tools/oracle.hpp"

namespace shardtopk::test {
namespace {

/// The best k of the union of lists [parts] of query q (the reference: a sort by better()).
std::vector<Candidate> best_of_union(const std::vector<Candidate>& lists, int parts, std::int64_t stride, int q,
                                     int k) {
  std::vector<Candidate> all;
  for (int p = 0; p < parts; ++p)
    all.insert(all.end(), lists.begin() + p * stride + static_cast<std::int64_t>(q) * k,
               lists.begin() + p * stride + static_cast<std::int64_t>(q + 1) * k);
  std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) { return better(a, b); });
  all.resize(static_cast<size_t>(k), pad_candidate());
  return all;
}

/// Merges on the device; lists are [parts] blocks of `stride` candidates (batch × k used, the
/// rest filled with candidates that would win if the merge read them).
std::vector<Candidate> merge_on_device(const std::vector<Candidate>& lists, int parts, std::int64_t stride, int batch,
                                       int k) {
  DeviceArray<Candidate> in(lists);
  DeviceArray<Candidate> out(static_cast<size_t>(batch) * k + 1, 0xFF);
  cuda_detail::merge_lists(in.get(), parts, stride, batch, k, out.get(), nullptr);
  std::vector<Candidate> got = out.download();
  EXPECT_EQ(got.back().id, -1) << "the merge wrote past out [batch, k]";
  got.pop_back();
  return got;
}

// A corpus split into P parts of uneven sizes (some smaller than k, one empty when P > rows / k):
// the oracle's top-k of each part (padded), merged on the device, equals the oracle's top-k of
// the whole corpus: ids and scores exact, ties broken on (shuffled) global ids. The lists lie
// `stride` apart with a gap after each; the gap holds candidates that would win if read.
TEST(Merge, OraclePartsMergeToTheOracleOfTheCorpus) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const std::int64_t n = 2000, dim = 3, nq = 4;
  const std::vector<float> corpus = small_ints(static_cast<size_t>(n * dim), 500, -2, 2);
  const std::vector<std::int64_t> ids = shuffled_ids(n, 501);
  const std::vector<float> q = small_ints(static_cast<size_t>(nq * dim), 502, -2, 2);
  for (const int parts : {1, 2, 3, 8, 64})
    for (const int k : {1, 7, 100, 1024}) {
      const std::string what = "parts " + std::to_string(parts) + " k " + std::to_string(k);
      const std::int64_t stride = nq * k + 5;
      std::vector<Candidate> lists(static_cast<size_t>(parts * stride), Candidate{1e30f, -1});
      std::int64_t lo = 0;
      for (int p = 0; p < parts; ++p) {
        // uneven parts: the first gets a third more than the rest
        const std::int64_t size = p == parts - 1 ? n - lo : std::min<std::int64_t>(n - lo, (n / parts) * (p == 0 ? 4 : 3) / 3);
        std::vector<std::int64_t> tid;
        std::vector<double> tsc;
        if (size > 0)
          oracle::topk(Metric::kInnerProduct, corpus.data() + lo * dim, size, ids.data() + lo, q.data(), nq, dim,
                       static_cast<int>(std::min<std::int64_t>(k, size)), &tid, &tsc);
        const int kk = static_cast<int>(std::min<std::int64_t>(k, size));
        for (std::int64_t qi = 0; qi < nq; ++qi)
          for (int j = 0; j < k; ++j)
            lists[p * stride + qi * k + j] =
                j < kk ? Candidate{static_cast<float>(tsc[qi * kk + j]), tid[qi * kk + j]} : pad_candidate();
        lo += size;
      }
      const std::vector<Candidate> got = merge_on_device(lists, parts, stride, static_cast<int>(nq), k);
      const int kk = static_cast<int>(std::min<std::int64_t>(k, n));
      expect_exact(Metric::kInnerProduct, corpus, n, ids.data(), q, nq, dim, kk,
                   to_answer(got, Metric::kInnerProduct, nq, k, kk), what);
      expect_padding(got, nq, k, kk, what);
    }
}

struct MergeCase {
  int parts, k;
  int mode;  // 0: random scores, 1: all scores equal, 2: three distinct scores
  std::string name() const {
    static const char* modes[] = {"random", "all_equal", "three_values"};
    return "p" + std::to_string(parts) + "_k" + std::to_string(k) + "_" + modes[mode];
  }
};
std::ostream& operator<<(std::ostream& os, const MergeCase& c) { return os << c.name(); }

std::vector<MergeCase> merge_cases() {
  std::vector<MergeCase> out;
  // parts: 1 (a copy), 2, 3, 8, 64 (64 × 1024 candidates: 32 blocks per query); k: 1, 7, 100, 1024
  for (int parts : {1, 2, 3, 8, 64})
    for (int k : {1, 7, 100, 1024})
      for (int mode : {0, 1, 2}) out.push_back({parts, k, mode});
  return out;
}

class MergeLists : public ::testing::TestWithParam<MergeCase> {};

// Lists [parts, batch, k], each sorted best first with a varying number of real candidates (0 ..
// k) followed by padding, ids unique across lists: the merge equals the ordering rule's best k
// of the union, bit for bit.
TEST_P(MergeLists, EqualsTheBestOfTheUnion) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const MergeCase& p = GetParam();
  const int batch = 5;
  std::mt19937_64 rng(1000 + p.parts * 7 + p.k + p.mode);
  std::vector<std::int64_t> ids(static_cast<size_t>(p.parts) * batch * p.k);
  std::iota(ids.begin(), ids.end(), 5000);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::uniform_real_distribution<float> score(-10.0f, 10.0f);
  std::vector<Candidate> lists(ids.size());
  size_t next = 0;
  for (int part = 0; part < p.parts; ++part)
    for (int b = 0; b < batch; ++b) {
      Candidate* l = lists.data() + (static_cast<size_t>(part) * batch + b) * p.k;
      const int real = (part * 37 + b * 11 + p.k / 2) % (p.k + 1);
      for (int j = 0; j < p.k; ++j) {
        if (j >= real) {
          l[j] = pad_candidate();
          continue;
        }
        const float s = p.mode == 0 ? score(rng) : p.mode == 1 ? 0.25f : static_cast<float>(rng() % 3);
        l[j] = Candidate{s, ids[next++]};
      }
      std::sort(l, l + p.k, [](const Candidate& a, const Candidate& b2) { return better(a, b2); });
    }
  const std::int64_t stride = static_cast<std::int64_t>(batch) * p.k;
  std::vector<Candidate> want;
  for (int b = 0; b < batch; ++b) {
    const std::vector<Candidate> w = best_of_union(lists, p.parts, stride, b, p.k);
    want.insert(want.end(), w.begin(), w.end());
  }
  expect_same_candidates(merge_on_device(lists, p.parts, stride, batch, p.k), want, p.name());
}

INSTANTIATE_TEST_SUITE_P(Gpu, MergeLists, ::testing::ValuesIn(merge_cases()),
                         [](const ::testing::TestParamInfo<MergeCase>& i) { return i.param.name(); });

// ±0 are equal scores (the id decides), and a real candidate scored -inf beats padding.
TEST(Merge, SignedZerosAndMinusInfinity) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<Candidate> lists = {{0.0f, 9}, {-inf, 4}, pad_candidate(),  // part 0
                                        {-0.0f, 3}, {-0.0f, 11}, pad_candidate()};
  const std::vector<Candidate> got = merge_on_device(lists, 2, 3, 1, 3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].id, 3);
  EXPECT_EQ(got[1].id, 9);
  EXPECT_EQ(got[2].id, 11);
  const std::vector<Candidate> tail = merge_on_device({{-inf, 4}, pad_candidate(), pad_candidate(), pad_candidate()},
                                                      2, 2, 1, 2);
  EXPECT_EQ(tail[0].id, 4) << "a real candidate at -inf beats padding";
  EXPECT_EQ(tail[1].id, kPadId);
}

TEST(Merge, EmptyBatchWritesNothing) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  DeviceArray<Candidate> out(4, 0xFF);
  cuda_detail::merge_lists(nullptr, 3, 0, 0, 4, out.get(), nullptr);
  for (const Candidate& c : out.download()) EXPECT_EQ(c.id, -1);
}

}  // namespace
}  // namespace shardtopk::test
