#pragma once
// The module's own CUDA runtime calls: stream-ordered result memory, ordering one stream after
// another, and a copy to the host. device_cuda.cpp implements them in a CUDA build;
// device_none.cpp otherwise (every call throws: no device array can exist there).
//
// Streams are cudaStream_t handles carried as integers, as Python passes them: 0 is the legacy
// default stream (so is cudaStreamLegacy, 1), 2 is the per-thread default stream.

#include <cstddef>
#include <cstdint>
#include <memory>

namespace shardtopk::python {

using StreamHandle = std::uintptr_t;

/// True when the module was built with CUDA.
bool cuda_built();

/// True when a and b name the same stream (0 and 1 are both the legacy default stream).
inline bool same_stream(StreamHandle a, StreamHandle b) {
  const auto norm = [](StreamHandle s) { return s == 0 ? StreamHandle{1} : s; };
  return norm(a) == norm(b);
}

/// Device memory from the module's pool on `device`, allocated in the order of `stream`
/// (cudaMallocFromPoolAsync) and given back in that order (cudaFreeAsync on the same stream) by
/// the destructor: work queued on `stream` after the allocation may use it, and the memory is
/// reused only after the work queued there before the free. Other streams must be ordered after
/// `stream` first (order_streams), as with PyTorch's caching allocator. The pool keeps up to
/// 64 MiB between uses, so a search's answers cost no call into the driver in steady state.
/// The free needs `stream` alive: `stream_owner` (the Python stream object the handle came from,
/// when there is one) is released only after it, so a CuPy stream the caller drops before the
/// answers stays alive until then.
class DeviceBlock {
 public:
  /// @throws Error naming the bytes and the device when the memory is refused.
  DeviceBlock(int device, std::size_t bytes, StreamHandle stream, std::shared_ptr<void> stream_owner = nullptr);
  ~DeviceBlock();
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
  void* data() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  int device() const { return device_; }
  StreamHandle stream() const { return stream_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = 0;
  StreamHandle stream_ = 0;
  std::shared_ptr<void> stream_owner_;  // released after the free (members outlive the destructor's body)
};

/// Makes `consumer` wait for the work queued on `producer` so far (an event recorded on
/// `producer`, waited for on `consumer`); nothing when they are the same stream. The host does
/// not wait. @throws Error on a failing CUDA call.
void order_streams(int device, StreamHandle producer, StreamHandle consumer);

/// Copies `bytes` from device memory to host memory in the order of `stream` and waits for the
/// copy (the one call of the module that waits for the device). @throws Error.
void copy_to_host(int device, void* host_dst, const void* device_src, std::size_t bytes, StreamHandle stream);

}  // namespace shardtopk::python
