// kernels/split and kernels/fill: the answer's split into ids and reported scores (into device
// memory and through the mapping of pinned host memory), and the padding fill.

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "engine/cuda/kernels/fill.hpp"
#include "engine/cuda/kernels/split.hpp"

namespace shardtopk::test {
namespace {

/// Candidates [n]: random scores, ±0, ±inf, padding; ids spread over int64.
std::vector<Candidate> some_candidates(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> s(-1e6f, 1e6f);
  std::vector<Candidate> c(static_cast<size_t>(n));
  const float inf = std::numeric_limits<float>::infinity();
  for (std::int64_t i = 0; i < n; ++i) {
    const int kind = static_cast<int>(rng() % 8);
    c[i].id = static_cast<std::int64_t>(rng() >> 1) - (std::int64_t{1} << 61);
    c[i].score = kind == 0 ? 0.0f : kind == 1 ? -0.0f : kind == 2 ? -inf : kind == 3 ? inf : s(rng);
    if (kind == 4) c[i] = pad_candidate();
  }
  return c;
}

/// ids and scores must be the list's ids and reported scores (l2: −score), bit for bit.
void expect_split(const std::vector<Candidate>& list, bool l2, const std::int64_t* ids, const float* scores,
                  const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const float want = l2 ? -list[i].score : list[i].score;
    if ((ids[i] != list[i].id || bits_of(scores[i]) != bits_of(want)) && ++bad <= 5)
      ADD_FAILURE() << what << ": element " << i << ": got id " << ids[i] << " score " << scores[i] << ", want id "
                    << list[i].id << " score " << want;
  }
  EXPECT_EQ(bad, 0) << what;
}

// Sizes around the 256-thread blocks (1, 255, 256, 257) and a large one; both metric families
// (l2 reports the negated ranking score: -(-0) = +0, -(+inf) = -inf, bit for bit).
TEST(Split, IntoDeviceMemory) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  for (const std::int64_t n : {1, 255, 256, 257, 100003})
    for (const bool l2 : {false, true}) {
      const std::string what = "n " + std::to_string(n) + (l2 ? " l2" : " ip");
      const std::vector<Candidate> list = some_candidates(n, 10 + n);
      DeviceArray<Candidate> dl(list);
      DeviceArray<std::int64_t> ids(static_cast<size_t>(n) + 1, 0xFF);
      DeviceArray<float> scores(static_cast<size_t>(n) + 1, 0xFF);
      cuda_detail::split_results(dl.get(), n, l2, ids.get(), scores.get(), nullptr);
      const std::vector<std::int64_t> hi = ids.download();
      const std::vector<float> hs = scores.download();
      expect_split(list, l2, hi.data(), hs.data(), what);
      EXPECT_EQ(hi[n], -1) << what << ": written past n";
      EXPECT_EQ(bits_of(hs[n]), 0xFFFFFFFFu) << what << ": written past n";
    }
}

// Into page-locked host memory through its device mapping (the one-rank answer's path): the
// host reads the answer after a stream synchronisation, with no copy.
TEST(Split, IntoMappedPinnedMemory) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const std::int64_t n = 64 * 1024;
  cuda_detail::PinnedBuffer pinned;
  pinned.allocate(static_cast<size_t>(n) * 12);
  void* dev = nullptr;
  CHECK_CUDA(cudaHostGetDevicePointer(&dev, pinned.get(), 0));
  cuda_detail::Stream stream;
  stream.create();
  for (const bool l2 : {false, true}) {
    const std::vector<Candidate> list = some_candidates(n, l2 ? 21 : 20);
    DeviceArray<Candidate> dl(list);
    // The upload (a pageable cudaMemcpy may return before its DMA lands) must be complete before
    // the split runs on a non-blocking stream, which does not order itself after it.
    CHECK_CUDA(cudaDeviceSynchronize());
    cuda_detail::split_results(dl.get(), n, l2, static_cast<std::int64_t*>(dev),
                               reinterpret_cast<float*>(static_cast<char*>(dev) + n * 8), stream.get());
    CHECK_CUDA(cudaStreamSynchronize(stream.get()));
    expect_split(list, l2, pinned.as<std::int64_t>(), reinterpret_cast<const float*>(pinned.as<char>() + n * 8),
                 l2 ? "mapped l2" : "mapped ip");
  }
  cuda_detail::split_results(nullptr, 0, false, nullptr, nullptr, stream.get());  // n = 0: nothing, no error
  CHECK_CUDA(cudaStreamSynchronize(stream.get()));
}

// fill_pad writes pad_candidate() to exactly [0, n): small sizes, and one beyond a grid-stride
// kernel's single pass (65,535 × 16 blocks of 256 threads), whose head and tail are checked.
TEST(Fill, PadsExactlyN) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  for (const std::int64_t n : {1, 255, 257, 1000003}) {
    DeviceArray<Candidate> out(static_cast<size_t>(n) + 1, 0x00);
    cuda_detail::fill_pad(out.get(), n, nullptr);
    const std::vector<Candidate> got = out.download();
    expect_padding(got, 1, static_cast<int>(n), 0, "fill n " + std::to_string(n));
    EXPECT_EQ(got[n].id, 0) << "written past n";
  }
  const std::int64_t big = 65535LL * 16 * 256 + 1000;
  DeviceArray<Candidate> out(static_cast<size_t>(big), 0x00);
  cuda_detail::fill_pad(out.get(), big, nullptr);
  CHECK_CUDA(cudaDeviceSynchronize());
  for (const std::int64_t at : {std::int64_t{0}, big - 4096}) {
    std::vector<Candidate> part(4096);
    CHECK_CUDA(cudaMemcpy(part.data(), out.get() + at, part.size() * sizeof(Candidate), cudaMemcpyDeviceToHost));
    expect_padding(part, 1, 4096, 0, "fill of " + std::to_string(big) + " at " + std::to_string(at));
  }
  cuda_detail::fill_pad(nullptr, 0, nullptr);  // nothing, no error
}

}  // namespace
}  // namespace shardtopk::test
