// The CUDA memory space (engine/space.hpp on a GPU): allocations, counted copies, ordering
// against other streams, the device merge with a list stride, and the split of an answer into
// mapped pinned memory.

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "shardtopk/space.hpp"

namespace shardtopk::test {
namespace {

std::unique_ptr<Space> space() { return make_cuda_space(test_device()); }

TEST(CudaSpace, DescribesItselfAndRefusesAMissingDevice) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  auto s = space();
  EXPECT_EQ(s->kind(), MemSpace::kDevice);
  EXPECT_EQ(s->device(), test_device());
  EXPECT_NE(s->stream(), nullptr);
  const std::string msg = error_of([] { make_cuda_space(cuda_device_count() + 3); });
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(cuda_device_count() + 3)), std::string::npos) << msg;
}

// Host↔device copies are counted (bytes, by direction); a copy within the space is not; a copy
// without wait is done once synchronize() returns.
TEST(CudaSpace, CountsTheCopiesBetweenHostAndDevice) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  auto s = space();
  const std::vector<float> host = random_floats(1000, 3);
  float* dev = static_cast<float*>(s->alloc(host.size() * sizeof(float)));
  float* dev2 = static_cast<float*>(s->alloc(host.size() * sizeof(float)));
  float* pinned = static_cast<float*>(s->alloc_host(host.size() * sizeof(float)));
  EXPECT_EQ(s->counters().host_to_device, 0u);
  s->from_host(dev, host.data(), host.size() * sizeof(float), true);
  s->copy(dev2, dev, host.size() * sizeof(float), nullptr);
  std::fill(pinned, pinned + host.size(), 0.0f);
  s->to_host(pinned, dev2, host.size() * sizeof(float), false);
  s->synchronize();
  EXPECT_EQ(std::vector<float>(pinned, pinned + host.size()), host);
  EXPECT_EQ(s->counters().host_to_device, host.size() * sizeof(float));
  EXPECT_EQ(s->counters().device_to_host, host.size() * sizeof(float)) << "the copy within the space is not counted";
  s->to_host(pinned, dev, 0, true);  // nothing
  EXPECT_EQ(s->counters().device_to_host, host.size() * sizeof(float));
  s->counters() = {};
  EXPECT_EQ(s->counters().host_to_device, 0u);
}

// copy(…, after) and wait_for() order the space's stream after another stream's work, and
// join_into() the reverse, without a host wait: a slow fill of 512 MiB queued on another stream
// must be complete in what the space copies afterwards.
TEST(CudaSpace, OrdersItsStreamAgainstAnother) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  auto s = space();
  use_test_device();
  cuda_detail::Stream other;
  other.create();
  const std::size_t big = 512u << 20;
  char* src = static_cast<char*>(s->alloc(big));
  char* dst = static_cast<char*>(s->alloc(big));
  std::vector<char> back(4096);
  for (const int value : {0x11, 0x22}) {
    CHECK_CUDA(cudaMemsetAsync(src, value, big, other.get()));
    if (value == 0x11) {
      s->copy(dst, src, big, other.get());
    } else {
      s->wait_for(other.get());
      s->copy(dst, src, big, nullptr);
    }
    s->to_host(back.data(), dst + big - back.size(), back.size(), true);
    EXPECT_TRUE(std::all_of(back.begin(), back.end(), [&](char c) { return c == static_cast<char>(value); }))
        << "the space's copy did not wait for the other stream (value " << value << ")";
  }
  // join_into: the other stream sees the space's slow fill
  s->fill_pad(reinterpret_cast<Candidate*>(src), static_cast<std::int64_t>(big / sizeof(Candidate)));
  s->join_into(other.get());
  std::vector<Candidate> tail(16);
  CHECK_CUDA(cudaMemcpyAsync(tail.data(), src + big - tail.size() * sizeof(Candidate), tail.size() * sizeof(Candidate),
                             cudaMemcpyDeviceToHost, other.get()));
  CHECK_CUDA(cudaStreamSynchronize(other.get()));
  expect_padding(tail, 1, 16, 0, "join_into");
}

// merge() of lists spaced list_stride apart (more than batch × k: the gaps hold candidates that
// would win if read) equals the ordering rule's best k of each query's lists.
TEST(CudaSpace, MergesListsAListStrideApart) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  auto s = space();
  const int parts = 3, batch = 4, k = 10;
  const std::int64_t stride = batch * k + 7;
  std::mt19937_64 rng(5);
  std::vector<Candidate> lists(static_cast<size_t>(parts * stride), Candidate{1e30f, -1});
  std::vector<std::int64_t> ids(static_cast<size_t>(parts * batch * k));
  std::iota(ids.begin(), ids.end(), 100);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  for (int p = 0; p < parts; ++p)
    for (int q = 0; q < batch; ++q) {
      Candidate* l = lists.data() + p * stride + q * k;
      for (int j = 0; j < k; ++j) l[j] = Candidate{static_cast<float>(rng() % 4), ids[next++]};
      std::sort(l, l + k, [](const Candidate& a, const Candidate& b) { return better(a, b); });
    }
  Candidate* dl = static_cast<Candidate*>(s->alloc(lists.size() * sizeof(Candidate)));
  Candidate* dout = static_cast<Candidate*>(s->alloc(static_cast<size_t>(batch * k) * sizeof(Candidate)));
  s->from_host(dl, lists.data(), lists.size() * sizeof(Candidate), false);
  s->merge(dl, parts, stride, batch, k, dout);
  std::vector<Candidate> got(static_cast<size_t>(batch * k));
  s->to_host(got.data(), dout, got.size() * sizeof(Candidate), true);
  std::vector<Candidate> want;
  for (int q = 0; q < batch; ++q) {
    std::vector<Candidate> all;
    for (int p = 0; p < parts; ++p)
      all.insert(all.end(), lists.begin() + p * stride + q * k, lists.begin() + p * stride + (q + 1) * k);
    std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) { return better(a, b); });
    want.insert(want.end(), all.begin(), all.begin() + k);
  }
  expect_same_candidates(got, want, "merge with list stride");
  // bad arguments name the value and change nothing
  EXPECT_NE(error_of([&] { s->merge(dl, 0, stride, batch, k, dout); }).find("parts"), std::string::npos);
  EXPECT_NE(error_of([&] { s->merge(dl, parts, batch * k - 1, batch, k, dout); }).find("list_stride"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s->merge(dl, parts, stride, batch, 0, dout); }).find("k"), std::string::npos);
  s->to_host(got.data(), dout, got.size() * sizeof(Candidate), true);
  expect_same_candidates(got, want, "after rejected merges");
}

// split() into mapped pinned memory (alloc_host + mapped): the host reads ids and reported
// scores after a synchronisation, with no copy; on the space's stream or a given one.
TEST(CudaSpace, SplitsIntoMappedPinnedMemory) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  auto s = space();
  const std::int64_t n = 1000;
  std::vector<Candidate> list(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) list[i] = Candidate{static_cast<float>(i % 7) - 3.0f, 10 * i};
  list[5] = pad_candidate();
  Candidate* dl = static_cast<Candidate*>(s->alloc(list.size() * sizeof(Candidate)));
  s->from_host(dl, list.data(), list.size() * sizeof(Candidate), true);
  auto* ids = static_cast<std::int64_t*>(s->alloc_host(static_cast<size_t>(n) * 8));
  auto* scores = static_cast<float*>(s->alloc_host(static_cast<size_t>(n) * 4));
  for (const bool l2 : {false, true}) {
    s->split(dl, n, l2, static_cast<std::int64_t*>(s->mapped(ids)), static_cast<float*>(s->mapped(scores)),
             l2 ? s->stream() : nullptr);
    s->synchronize();
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(ids[i], list[i].id) << (l2 ? "l2" : "ip") << " element " << i;
      ASSERT_EQ(bits_of(scores[i]), bits_of(l2 ? -list[i].score : list[i].score)) << (l2 ? "l2" : "ip") << " element " << i;
    }
  }
  EXPECT_EQ(s->counters().device_to_host, 0u) << "the split is not a counted copy (the caller counts its answer)";
}

// split() with a status copy: the answer and every rank's status slot (strided, as in a
// gathered buffer) in one launch; also with more statuses than candidates, and no candidates.
TEST(CudaSpace, SplitCopiesRankStatusesWithTheAnswer) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  auto s = space();
  const int ranks = 5;
  for (const std::int64_t n : {std::int64_t{0}, std::int64_t{3}, std::int64_t{700}}) {
    const std::int64_t stride = 1 + n;
    std::vector<Candidate> gathered(static_cast<size_t>(ranks * stride));
    for (int r = 0; r < ranks; ++r) {
      gathered[static_cast<size_t>(r * stride)] = Candidate{static_cast<float>(r % 2), 1000 + r};  // the status slot
      for (std::int64_t i = 1; i < stride; ++i) gathered[static_cast<size_t>(r * stride + i)] = Candidate{1.5f, i};
    }
    Candidate* dg = static_cast<Candidate*>(s->alloc(gathered.size() * sizeof(Candidate)));
    s->from_host(dg, gathered.data(), gathered.size() * sizeof(Candidate), true);
    auto* ids = static_cast<std::int64_t*>(s->alloc_host(static_cast<size_t>(std::max<std::int64_t>(n, 1)) * 8));
    auto* scores = static_cast<float*>(s->alloc_host(static_cast<size_t>(std::max<std::int64_t>(n, 1)) * 4));
    auto* st = static_cast<Candidate*>(s->alloc_host(ranks * sizeof(Candidate)));
    for (int r = 0; r < ranks; ++r) st[r] = Candidate{-7.0f, -7};
    Space::StatusCopy copy{dg, stride, ranks, static_cast<Candidate*>(s->mapped(st))};
    s->split(dg + 1, n, false, static_cast<std::int64_t*>(s->mapped(ids)), static_cast<float*>(s->mapped(scores)),
             nullptr, &copy);
    s->synchronize();
    for (int r = 0; r < ranks; ++r) {
      EXPECT_EQ(st[r].id, 1000 + r) << "n=" << n << " rank " << r;
      EXPECT_EQ(bits_of(st[r].score), bits_of(static_cast<float>(r % 2))) << "n=" << n << " rank " << r;
    }
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(ids[i], i + 1) << "n=" << n << " element " << i;
      ASSERT_EQ(bits_of(scores[i]), bits_of(1.5f)) << "n=" << n << " element " << i;
    }
  }
}

}  // namespace
}  // namespace shardtopk::test
