// CUDA events on the engine's stream (built only with SHARDTOPK_WITH_CUDA).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "device_timer.hpp"
#include "harness.hpp"

namespace shardtopk::bench {

std::unique_ptr<DeviceTimer> make_host_timer();

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("bench: ") + what + ": " + cudaGetErrorName(e) + " (" +
                                                 cudaGetErrorString(e) + ")");
}

class EventTimer final : public DeviceTimer {
 public:
  explicit EventTimer(void* stream) : stream_(static_cast<cudaStream_t>(stream)) {
    check(cudaEventCreate(&a_), "cudaEventCreate");
    check(cudaEventCreate(&b_), "cudaEventCreate");
  }
  ~EventTimer() override {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  void start() override { check(cudaEventRecord(a_, stream_), "cudaEventRecord(start)"); }
  void stop() override { check(cudaEventRecord(b_, stream_), "cudaEventRecord(stop)"); }
  double elapsed_ms() override {
    check(cudaEventSynchronize(b_), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a_, b_), "cudaEventElapsedTime");
    return ms;
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t a_ = nullptr, b_ = nullptr;
};

}  // namespace

std::unique_ptr<DeviceTimer> make_device_timer(Engine& engine) {
  if (engine.info().space != MemSpace::kDevice) return make_host_timer();
  return std::make_unique<EventTimer>(static_cast<cudaStream_t>(engine.stream()));
}

std::string engine_device_name(Engine& engine, int device) {
  if (engine.info().space != MemSpace::kDevice) return cpu_name();
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
  return p.name;
}

}  // namespace shardtopk::bench
