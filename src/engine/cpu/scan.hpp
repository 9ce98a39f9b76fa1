#pragma once
// The CPU engine's scoring and selection scan: rows of the resident shard against a batch of
// padded queries, each (query, row) score offered to the thread's Selector. Three instruction
// sets with one arithmetic (layout.hpp).

#include <cstdint>

#include "engine/cpu/selector.hpp"
#include "shardtopk/config.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk::cpu_detail {

enum class Isa { kPortable, kAvx2, kAvx512 };

const char* isa_name(Isa isa);

/// The best the CPU has, or what engine.cpu_isa asks for.
/// @throws Error when the CPU lacks the instruction set asked for.
Isa choose_isa(CpuIsa want);

/// What a scan reads: the shard's storage (layout.hpp) and the padded queries.
struct ScanInput {
  const float* f32 = nullptr;          ///< storage when dtype is float32
  const std::uint16_t* u16 = nullptr;  ///< float16 / bfloat16 storage otherwise
  Dtype dtype = Dtype::kFloat32;
  bool l2 = false;                     ///< scores are squared distances (Selector ranks them negated)
  Isa isa = Isa::kPortable;
  std::int64_t dp = 0;                 ///< padded dimension, a multiple of 8
  const float* queries = nullptr;      ///< [batch, dp] queries, zero-padded
  int batch = 0;
};

/// Scores rows [r0, r1) (r0 even: whole row pairs) against every query of `in` and offers each
/// score to `sel`. The order rows are offered in depends on the instruction set; the scores and
/// the selection's result do not.
void scan_rows(const ScanInput& in, std::int64_t r0, std::int64_t r1, const Selector& sel);

/// Rounds `row` [dim] (float32, every value finite in float16) to float16 (nearest, ties to
/// even: the bits of half::to_f16) into one row of the storage layout, whose chunk c starts at
/// dst + 16·c (layout.hpp). F16C when the CPU has it (8 values per instruction).
void store_f16_row(const float* row, std::int64_t dim, std::uint16_t* dst);

}  // namespace shardtopk::cpu_detail
