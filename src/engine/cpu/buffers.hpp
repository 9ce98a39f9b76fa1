#pragma once
// The CPU engine's memory plan: every buffer it allocates at start-up, and the refusal of a plan
// this machine cannot hold.

#include <cstdint>
#include <string>
#include <vector>

#include "shardtopk/engine.hpp"

namespace shardtopk::cpu_detail {

// Every buffer the engine allocates at start-up, sized from the limits (the constructor and
// cpu_engine_host_bytes() both use this list, so `plan` shows what the engine will hold).
// Saturating arithmetic: absurd limits give UINT64_MAX, never a wrapped small number.
/// What a buffer's size follows, so a refusal names the setting that shrinks it.
enum class SizedBy { kRows, kFilters, kBatch };

struct CpuBuffer {
  const char* name;
  std::string shape;
  std::uint64_t bytes;
  SizedBy sized_by;
};

/// The buffers of a shard of `rows` slots × `dim` in `dtype` with `threads` workers.
std::vector<CpuBuffer> cpu_buffers(std::int64_t rows, std::int64_t dim, Dtype dtype, const EngineLimits& limits,
                                   int threads);

/// Sum of the buffers' bytes, saturating at UINT64_MAX.
std::uint64_t total_bytes(const std::vector<CpuBuffer>& bufs);

/// Refuses, before anything is allocated, buffers that do not fit this machine's memory shared
/// by `ranks_on_host` ranks (physical memory / ranks_on_host each).
/// @throws Error naming the largest buffer, its shape and bytes, the total, the share and the
/// setting that shrinks that buffer.
void check_buffers_fit(const std::vector<CpuBuffer>& bufs, const EngineLimits& limits, int ranks_on_host = 1);

}  // namespace shardtopk::cpu_detail
