#pragma once
// Private helpers for the CUDA sources: checked CUDA/cuBLAS/NCCL calls that throw
// shardtopk::Error (never abort(): in a service one rank's abort() kills every rank), and a
// device guard. The RAII holders of CUDA resources are in cuda_raii.cuh.
//
// Messages name the call as written, the error's name and description, the current device
// and file:line, e.g.
//   CUDA call cudaMalloc(&p, bytes) failed on device 0: cudaErrorMemoryAllocation (out of
//   memory) at src/engine/cuda/cuda_space.cu:48
// Callers that know their MPI rank (the NCCL communicator) prefix "rank R: " themselves.
// CHECK_NCCL exists only where <nccl.h> was included before this header (nccl_comm.cu), so the
// engine does not depend on NCCL headers.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "shardtopk/error.hpp"


namespace shardtopk::cuda_detail {

/// Builds the message for a failed CUDA runtime call and throws Error.
[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  int dev = -1;
  // Asking for the device after a failure is harmless: cudaGetDevice does not clear or set the
  // sticky error state, and its own failure only leaves dev = -1.
  (void)cudaGetDevice(&dev);
  // Clear a non-sticky error so that the next (unrelated) call does not report it again.
  (void)cudaGetLastError();
  throw Error(detail::concat("CUDA call ", call, " failed on device ", dev, ": ", cudaGetErrorName(err), " (",
                             cudaGetErrorString(err), ") at ", file, ":", line));
}

/// Builds the message for a failed cuBLAS call and throws Error.
[[noreturn]] inline void throw_cublas_error(cublasStatus_t st, const char* call, const char* file, int line) {
  throw Error(detail::concat("cuBLAS call ", call, " failed: ", cublasGetStatusString(st), " at ", file, ":", line));
}

/// Makes `device` current for the lifetime of the guard and restores the previous device, so an
/// engine can be used from a thread whose current device is another one (tests, the service).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&prev_) != cudaSuccess) prev_ = -1;
    if (prev_ != device) {
      const cudaError_t err = cudaSetDevice(device);
      if (err != cudaSuccess) throw_cuda_error(err, "cudaSetDevice(device)", __FILE__, __LINE__);
      switched_ = true;
    }
  }
  ~DeviceGuard() {
    if (switched_ && prev_ >= 0) (void)cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
  bool switched_ = false;
};

}  // namespace shardtopk::cuda_detail

/// Checks a CUDA runtime call; throws shardtopk::Error with the call text, the error name and
/// string, the device and file:line.
#define CHECK_CUDA(call)                                                                     \
  do {                                                                                       \
    const cudaError_t shardtopk_cuda_err_ = (call);                                          \
    if (shardtopk_cuda_err_ != cudaSuccess)                                                  \
      ::shardtopk::cuda_detail::throw_cuda_error(shardtopk_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

/// Checks the launch of the kernel just enqueued (bad configuration, too much shared memory).
/// Faults inside the kernel surface at the next synchronising call, which is checked too.
#define CHECK_CUDA_LAUNCH() CHECK_CUDA(cudaGetLastError())

/// Checks a cuBLAS call; throws shardtopk::Error with the call text, cuBLAS's status string and
/// file:line.
#define CHECK_CUBLAS(call)                                                                     \
  do {                                                                                         \
    const cublasStatus_t shardtopk_cublas_st_ = (call);                                        \
    if (shardtopk_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                         \
      ::shardtopk::cuda_detail::throw_cublas_error(shardtopk_cublas_st_, #call, __FILE__, __LINE__); \
  } while (0)

#if defined(NCCL_MAJOR)
namespace shardtopk::cuda_detail {

/// Builds the message for a failed NCCL call and throws Error. `ncclGetLastError` adds NCCL's
/// own explanation (e.g. which peer or transport failed) when it has one.
[[noreturn]] inline void throw_nccl_error(ncclResult_t res, const char* call, const char* file, int line) {
  const char* last = ncclGetLastError(nullptr);
  throw Error(detail::concat("NCCL call ", call, " failed: ", ncclGetErrorString(res),
                             (last && *last ? std::string(" (") + last + ")" : std::string()), " at ", file, ":",
                             line));
}

}  // namespace shardtopk::cuda_detail

/// Checks an NCCL call that must return ncclSuccess; throws shardtopk::Error with the call
/// text, NCCL's error string and last-error detail, and file:line. Calls on a non-blocking
/// communicator that may return ncclInProgress are handled by the communicator, not here.
#define CHECK_NCCL(call)                                                                     \
  do {                                                                                       \
    const ncclResult_t shardtopk_nccl_res_ = (call);                                         \
    if (shardtopk_nccl_res_ != ncclSuccess)                                                  \
      ::shardtopk::cuda_detail::throw_nccl_error(shardtopk_nccl_res_, #call, __FILE__, __LINE__); \
  } while (0)
#endif
