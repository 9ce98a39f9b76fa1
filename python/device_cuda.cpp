// The module's CUDA runtime calls (device.hpp), CUDA builds only.
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "core/cuda_check.cuh"
#include "device.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::python {
namespace {

using cuda_detail::DeviceGuard;

cudaStream_t as_stream(StreamHandle s) { return reinterpret_cast<cudaStream_t>(s); }

// One pool per device, created on first use and kept for the life of the process (arrays held by
// other libraries may outlive any owner we could give it). Its own pool, not the device's
// default one, so that its release threshold is ours to set and nobody else's allocations share
// its memory.
cudaMemPool_t pool_of(int device) {
  static std::mutex mu;
  static std::unordered_map<int, cudaMemPool_t> pools;
  std::lock_guard<std::mutex> lock(mu);
  auto it = pools.find(device);
  if (it != pools.end()) return it->second;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  CHECK_CUDA(cudaMemPoolCreate(&pool, &props));
  // Keep up to 64 MiB when the pool is idle: a search's answers then never reach the driver.
  std::uint64_t keep = 64ull << 20;
  CHECK_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  pools.emplace(device, pool);
  return pool;
}

// An event per (thread, device) for order_streams: recorded and waited for at once, so reusing
// it is safe (a wait takes the event's state at the time of the call).
cudaEvent_t ordering_event(int device) {
  thread_local std::unordered_map<int, cudaEvent_t> events;
  auto it = events.find(device);
  if (it != events.end()) return it->second;
  cudaEvent_t e = nullptr;
  CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  events.emplace(device, e);
  return e;
}

}  // namespace

bool cuda_built() { return true; }

DeviceBlock::DeviceBlock(int device, std::size_t bytes, StreamHandle stream, std::shared_ptr<void> stream_owner)
    : bytes_(bytes), device_(device), stream_(stream), stream_owner_(std::move(stream_owner)) {
  if (bytes == 0) return;
  DeviceGuard guard(device);
  const cudaError_t err = cudaMallocFromPoolAsync(&ptr_, bytes, pool_of(device), as_stream(stream));
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    ptr_ = nullptr;
    throw Error(detail::concat("cannot allocate ", bytes, " bytes of device memory on cuda:", device,
                               " for the answer (", cudaGetErrorName(err), ": ", cudaGetErrorString(err),
                               "); pass out=(ids, scores) to use memory of your own"));
  }
}

DeviceBlock::~DeviceBlock() {
  if (!ptr_) return;
  int prev = -1;
  (void)cudaGetDevice(&prev);
  if (prev != device_) (void)cudaSetDevice(device_);
  // Errors are ignored: a destructor may run while the process ends or another error unwinds.
  if (cudaFreeAsync(ptr_, as_stream(stream_)) != cudaSuccess) (void)cudaGetLastError();
  if (prev >= 0 && prev != device_) (void)cudaSetDevice(prev);
}

void order_streams(int device, StreamHandle producer, StreamHandle consumer) {
  if (same_stream(producer, consumer)) return;
  DeviceGuard guard(device);
  cudaEvent_t e = ordering_event(device);
  CHECK_CUDA(cudaEventRecord(e, as_stream(producer)));
  CHECK_CUDA(cudaStreamWaitEvent(as_stream(consumer), e, 0));
}

void copy_to_host(int device, void* host_dst, const void* device_src, std::size_t bytes, StreamHandle stream) {
  if (bytes == 0) return;
  DeviceGuard guard(device);
  CHECK_CUDA(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, as_stream(stream)));
  CHECK_CUDA(cudaStreamSynchronize(as_stream(stream)));
}

}  // namespace shardtopk::python
