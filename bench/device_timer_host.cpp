// Host wall-clock timer, and the CUDA-free half of device_timer.hpp.
#include <chrono>

#include "device_timer.hpp"
#include "harness.hpp"

namespace shardtopk::bench {

class HostTimer final : public DeviceTimer {
 public:
  void start() override { t0_ = std::chrono::steady_clock::now(); }
  void stop() override { t1_ = std::chrono::steady_clock::now(); }
  double elapsed_ms() override { return std::chrono::duration<double, std::milli>(t1_ - t0_).count(); }

 private:
  std::chrono::steady_clock::time_point t0_, t1_;
};

std::unique_ptr<DeviceTimer> make_host_timer() { return std::make_unique<HostTimer>(); }

#ifndef SHARDTOPK_WITH_CUDA
std::unique_ptr<DeviceTimer> make_device_timer(Engine&) { return make_host_timer(); }
std::string engine_device_name(Engine&, int) { return cpu_name(); }
#endif

}  // namespace shardtopk::bench
