// The data path's memory on a host-only rank (the CPU engine): plain memory, memcpy, the host
// merge. Nothing is queued: every call is done when it returns.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <list>
#include <memory>
#include <vector>

#include "shardtopk/space.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/merge.hpp"

namespace shardtopk {
namespace {

class HostSpace final : public Space {
 public:
  MemSpace kind() const override { return MemSpace::kHost; }
  void* stream() const override { return nullptr; }
  int device() const override { return -1; }

  void* alloc(std::size_t bytes) override {
    // 64-byte aligned (the CPU engine's vector loads), zeroed: buffers never hold stale bytes.
    const std::size_t n = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, n);
    SHARDTOPK_EXPECTS(p != nullptr, "host memory: ", bytes, " bytes could not be allocated");
    std::memset(p, 0, n);
    blocks_.emplace_back(p);
    return p;
  }
  void* alloc_host(std::size_t bytes) override { return alloc(bytes); }
  void* mapped(void* host_ptr) const override { return host_ptr; }

  void to_host(void* host_dst, const void* src, std::size_t bytes, bool) override {
    if (bytes) std::memmove(host_dst, src, bytes);
  }
  void from_host(void* dst, const void* host_src, std::size_t bytes, bool) override {
    if (bytes) std::memmove(dst, host_src, bytes);
  }
  void copy(void* dst, const void* src, std::size_t bytes, void*) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void wait_for(void*) override {}
  void join_into(void*) override {}
  void synchronize() override {}

  void fill_pad(Candidate* out, std::int64_t n) override {
    for (std::int64_t i = 0; i < n; ++i) out[i] = pad_candidate();
  }
  void merge(const Candidate* lists, int parts, std::int64_t list_stride, int batch, int k, Candidate* out) override {
    merge_topk_host(lists, parts, list_stride, batch, k, out);
  }
  void split(const Candidate* list, std::int64_t n, bool l2, std::int64_t* ids, float* scores, void*,
             const StatusCopy* status, const InvalidRows* invalid) override {
    for (std::int64_t i = 0; i < n; ++i) {
      if (invalid && invalid->flags[i / invalid->k]) {
        ids[i] = kPadId;
        scores[i] = std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      ids[i] = list[i].id;
      scores[i] = l2 ? -list[i].score : list[i].score;
    }
    if (status)
      for (int i = 0; i < status->count; ++i) status->dst[i] = status->src[i * status->stride];
  }

  TransferCounters& counters() override { return counters_; }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::list<std::unique_ptr<void, Free>> blocks_;
  TransferCounters counters_;  // host copies are not host<->device traffic: stays zero
};

}  // namespace

std::unique_ptr<Space> make_host_space() { return std::make_unique<HostSpace>(); }

}  // namespace shardtopk
