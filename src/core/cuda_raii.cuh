#pragma once
// RAII holders of CUDA resources, one of each: device memory, page-locked host memory, a
// stream, an event, a cuBLAS handle. Each owns at most one resource, is movable and not
// copyable, and releases it in its destructor without throwing (errors there are ignored: a
// destructor may run while another error unwinds). Creation is checked (CHECK_CUDA /
// CHECK_CUBLAS) and throws shardtopk::Error. Host-only code: usable from .cpp files (tests).
//
// Device resources are created on the current device; the holder remembers it and makes it
// current again to release them, restoring the caller's device afterwards.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "core/cuda_check.cuh"

namespace shardtopk::cuda_detail {

inline int current_device() {
  int d = -1;
  CHECK_CUDA(cudaGetDevice(&d));
  return d;
}

/// Owns one resource of type T (a pointer or an opaque handle; T{} is "none"), released by
/// Release(T) with `device` current (-1: any device). Movable, not copyable.
template <typename T, void (*Release)(T)>
class Unique {
 public:
  Unique() = default;
  Unique(Unique&& o) noexcept : v_(std::exchange(o.v_, T{})), device_(o.device_) {}
  Unique& operator=(Unique&& o) noexcept {
    if (this != &o) {
      reset();
      v_ = std::exchange(o.v_, T{});
      device_ = o.device_;
    }
    return *this;
  }
  Unique(const Unique&) = delete;
  Unique& operator=(const Unique&) = delete;
  ~Unique() { reset(); }

  void reset() noexcept {
    if (!v_) return;
    int prev = -1;
    const bool known = cudaGetDevice(&prev) == cudaSuccess;
    const bool switch_device = device_ >= 0 && known && prev != device_;
    if (switch_device) (void)cudaSetDevice(device_);
    Release(v_);
    if (switch_device) (void)cudaSetDevice(prev);
    v_ = T{};
  }
  T get() const { return v_; }
  explicit operator bool() const { return v_ != T{}; }

 protected:
  T v_{};
  int device_ = -1;
};

inline void free_device(void* p) { (void)cudaFree(p); }
inline void free_pinned(void* p) { (void)cudaFreeHost(p); }
inline void destroy_stream(cudaStream_t s) {
  (void)cudaStreamSynchronize(s);  // no work may outlive the stream (or the memory it uses)
  (void)cudaStreamDestroy(s);
}
inline void destroy_event(cudaEvent_t e) { (void)cudaEventDestroy(e); }
inline void destroy_cublas(cublasHandle_t h) { (void)cublasDestroy(h); }

/// Device memory (cudaMalloc) of the current device.
class DeviceBuffer : public Unique<void*, free_device> {
 public:
  /// Allocates `bytes`; returns cudaMalloc's status and clears a failure's error state, so
  /// that the caller can explain an out-of-memory in its own words.
  cudaError_t try_allocate(std::size_t bytes) {
    reset();
    device_ = current_device();
    const cudaError_t err = cudaMalloc(&v_, bytes);
    if (err != cudaSuccess) {
      v_ = nullptr;
      (void)cudaGetLastError();
    }
    return err;
  }
  void allocate(std::size_t bytes) {
    const cudaError_t err = try_allocate(bytes);
    if (err != cudaSuccess) throw_cuda_error(err, "cudaMalloc(bytes)", __FILE__, __LINE__);
  }
  template <typename U>
  U* as() const {
    return static_cast<U*>(v_);
  }
};

/// Page-locked host memory (cudaHostAlloc). Under unified addressing (every 64-bit platform
/// CUDA supports) it is also mapped into every device's address space.
class PinnedBuffer : public Unique<void*, free_pinned> {
 public:
  void allocate(std::size_t bytes, unsigned flags = cudaHostAllocDefault) {
    reset();
    CHECK_CUDA(cudaHostAlloc(&v_, bytes, flags));
    bytes_ = bytes;
  }
  template <typename U>
  U* as() const {
    return static_cast<U*>(v_);
  }
  /// True when address p lies inside the buffer.
  bool holds(const void* p) const {
    const char* b = static_cast<const char*>(v_);
    const char* c = static_cast<const char*>(p);
    return b != nullptr && c >= b && c < b + bytes_;
  }

 private:
  std::size_t bytes_ = 0;
};

/// A stream of the current device; destruction waits for its work, then destroys it.
class Stream : public Unique<cudaStream_t, destroy_stream> {
 public:
  void create(unsigned flags = cudaStreamNonBlocking) {
    reset();
    device_ = current_device();
    CHECK_CUDA(cudaStreamCreateWithFlags(&v_, flags));
  }
};

/// An event of the current device.
class Event : public Unique<cudaEvent_t, destroy_event> {
 public:
  void create(unsigned flags = cudaEventDisableTiming) {
    reset();
    device_ = current_device();
    CHECK_CUDA(cudaEventCreateWithFlags(&v_, flags));
  }
};

/// A cuBLAS handle of the current device.
class CublasHandle : public Unique<cublasHandle_t, destroy_cublas> {
 public:
  void create() {
    reset();
    device_ = current_device();
    CHECK_CUBLAS(cublasCreate(&v_));
  }
};

}  // namespace shardtopk::cuda_detail
