#pragma once
/// @file device_timer.hpp
/// Device-only timing of engine work. With the CUDA engine: CUDA events recorded on the engine's
/// stream (device_timer.cu, built only with SHARDTOPK_WITH_CUDA, so no CUDA header leaks into
/// host code); with the CPU engine: the host wall clock around the call.

#include <memory>
#include <string>

#include "shardtopk/engine.hpp"

namespace shardtopk::bench {

class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  virtual void start() = 0;  ///< recorded on the engine's stream
  virtual void stop() = 0;
  /// Milliseconds between start and stop; waits for stop to complete.
  virtual double elapsed_ms() = 0;
};

std::unique_ptr<DeviceTimer> make_device_timer(Engine& engine);

/// "NVIDIA H200" (the CUDA engine's device), or the CPU model for the CPU engine.
std::string engine_device_name(Engine& engine, int device);

}  // namespace shardtopk::bench
