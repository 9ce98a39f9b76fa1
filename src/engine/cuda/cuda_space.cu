// The data path's memory on one GPU: device and mapped pinned allocations made at start-up,
// counted copies between the host and the device, ordering between streams through an event,
// and the device merge and split of candidate lists (engine/space.hpp).

#include <cuda_runtime.h>

#include <algorithm>
#include <list>
#include <memory>

#include "core/cuda_check.cuh"
#include "core/cuda_raii.cuh"
#include "engine/cuda/kernels/fill.hpp"
#include "engine/cuda/kernels/merge.hpp"
#include "engine/cuda/kernels/split.hpp"
#include "shardtopk/space.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk {
namespace {

using cuda_detail::DeviceGuard;

class CudaSpace final : public Space {
 public:
  explicit CudaSpace(int device) : device_(device) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      (void)cudaGetLastError();
      count = 0;
    }
    SHARDTOPK_EXPECTS(device >= 0 && device < count, "CUDA space: device ", device, " does not exist (", count,
                      " visible)");
    DeviceGuard guard(device_);
    stream_.create(cudaStreamNonBlocking);
    order_.create(cudaEventDisableTiming);
  }

  MemSpace kind() const override { return MemSpace::kDevice; }
  void* stream() const override { return stream_.get(); }
  int device() const override { return device_; }

  void* alloc(std::size_t bytes) override {
    DeviceGuard guard(device_);
    device_buffers_.emplace_back();
    const cudaError_t err = device_buffers_.back().try_allocate(std::max<std::size_t>(bytes, 1));
    if (err != cudaSuccess) {
      device_buffers_.pop_back();
      throw Error(detail::concat("CUDA space on device ", device_, ": cannot allocate ", bytes,
                                 " bytes of device memory (", cudaGetErrorName(err), ": ", cudaGetErrorString(err),
                                 ")"));
    }
    return device_buffers_.back().get();
  }

  void* alloc_host(std::size_t bytes) override {
    DeviceGuard guard(device_);
    host_buffers_.emplace_back();
    try {
      host_buffers_.back().allocate(std::max<std::size_t>(bytes, 1));
    } catch (const Error& e) {
      host_buffers_.pop_back();
      throw Error(detail::concat("CUDA space on device ", device_, ": cannot allocate ", bytes,
                                 " bytes of page-locked host memory: ", e.what()));
    }
    return host_buffers_.back().get();
  }

  void* mapped(void* host_ptr) const override {
    DeviceGuard guard(device_);
    void* dev = nullptr;
    CHECK_CUDA(cudaHostGetDevicePointer(&dev, host_ptr, 0));
    return dev;
  }

  void to_host(void* host_dst, const void* src, std::size_t bytes, bool wait) override {
    copy_counted(host_dst, src, bytes, cudaMemcpyDeviceToHost, wait);
    counters_.device_to_host += bytes;
  }

  void from_host(void* dst, const void* host_src, std::size_t bytes, bool wait) override {
    copy_counted(dst, host_src, bytes, cudaMemcpyHostToDevice, wait);
    counters_.host_to_device += bytes;
  }

  void copy(void* dst, const void* src, std::size_t bytes, void* after) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_);
    wait_for(after);
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_.get()));
  }

  void wait_for(void* other) override { order(static_cast<cudaStream_t>(other), stream_.get()); }
  void join_into(void* other) override { order(stream_.get(), static_cast<cudaStream_t>(other)); }

  void synchronize() override {
    DeviceGuard guard(device_);
    CHECK_CUDA(cudaStreamSynchronize(stream_.get()));
  }

  void fill_pad(Candidate* out, std::int64_t n) override {
    SHARDTOPK_EXPECTS(n >= 0, "fill_pad: n must be >= 0 (got ", n, ")");
    if (n == 0) return;
    SHARDTOPK_EXPECTS(out != nullptr, "fill_pad: null buffer");
    DeviceGuard guard(device_);
    cuda_detail::fill_pad(out, n, stream_.get());
  }

  void merge(const Candidate* lists, int parts, std::int64_t list_stride, int batch, int k, Candidate* out) override {
    SHARDTOPK_EXPECTS(parts >= 1, "merge: parts must be >= 1 (got ", parts, ")");
    SHARDTOPK_EXPECTS(batch >= 0, "merge: batch must be >= 0 (got ", batch, ")");
    SHARDTOPK_EXPECTS(k >= 1, "merge: k must be >= 1 (got ", k, ")");
    SHARDTOPK_EXPECTS(parts == 1 || list_stride >= static_cast<std::int64_t>(batch) * k, "merge: list_stride ",
                      list_stride, " is smaller than a list's batch x k = ", static_cast<std::int64_t>(batch) * k);
    if (batch == 0) return;
    SHARDTOPK_EXPECTS(lists != nullptr && out != nullptr, "merge: null buffer");
    DeviceGuard guard(device_);
    cuda_detail::merge_lists(lists, parts, list_stride, batch, k, out, stream_.get());
  }

  void split(const Candidate* list, std::int64_t n, bool l2, std::int64_t* ids, float* scores, void* stream,
             const StatusCopy* status, const InvalidRows* invalid) override {
    SHARDTOPK_EXPECTS(n >= 0, "split: n must be >= 0 (got ", n, ")");
    const cudaStream_t s = stream ? static_cast<cudaStream_t>(stream) : stream_.get();
    if (invalid && invalid->flags) {
      SHARDTOPK_EXPECTS(!status, "split: invalid rows and a status copy cannot be combined");
      SHARDTOPK_EXPECTS(invalid->k >= 1, "split: invalid rows need k >= 1");
      if (n == 0) return;
      DeviceGuard guard(device_);
      cuda_detail::split_results_marked(list, n, l2, ids, scores, invalid->flags, invalid->k, s);
      return;
    }
    if (status && status->count > 0) {
      SHARDTOPK_EXPECTS(status->src != nullptr && status->dst != nullptr, "split: null status buffer");
      SHARDTOPK_EXPECTS(n == 0 || (list != nullptr && ids != nullptr && scores != nullptr), "split: null buffer");
      DeviceGuard guard(device_);
      cuda_detail::split_results_with_status(list, n, l2, ids, scores, status->src, status->stride, status->count,
                                             status->dst, s);
      return;
    }
    if (n == 0) return;
    SHARDTOPK_EXPECTS(list != nullptr && ids != nullptr && scores != nullptr, "split: null buffer");
    DeviceGuard guard(device_);
    cuda_detail::split_results(list, n, l2, ids, scores, s);
  }

  TransferCounters& counters() override { return counters_; }

 private:
  void copy_counted(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, bool wait) {
    if (bytes == 0) return;
    DeviceGuard guard(device_);
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, stream_.get()));
    if (wait) CHECK_CUDA(cudaStreamSynchronize(stream_.get()));
  }

  /// `later` waits (on the device) for the work queued so far on `first`.
  // nullptr is the legacy default stream (what a framework's default stream often is), which a
  // non-blocking stream does not wait for by itself: it is ordered like any other.
  void order(cudaStream_t first, cudaStream_t later) {
    if (first == later) return;
    DeviceGuard guard(device_);
    CHECK_CUDA(cudaEventRecord(order_.get(), first));
    CHECK_CUDA(cudaStreamWaitEvent(later, order_.get(), 0));
  }

  int device_;
  // Declaration order = reverse destruction order: the stream (which waits for its work) goes
  // before the memory its work used.
  std::list<cuda_detail::DeviceBuffer> device_buffers_;  // a list: elements never move
  std::list<cuda_detail::PinnedBuffer> host_buffers_;
  cuda_detail::Stream stream_;
  cuda_detail::Event order_;
  TransferCounters counters_;
};

}  // namespace

std::unique_ptr<Space> make_cuda_space(int device) { return std::make_unique<CudaSpace>(device); }

}  // namespace shardtopk
