#pragma once
// The CPU engine's storage layout and the fixed-order arithmetic every scoring path shares.
//
// Determinism (DESIGN.md invariant 3): every (query, row) score is computed by the same
// arithmetic whatever the batch, tile shape, thread count, shard or instruction set: D is
// zero-padded to a multiple of 8 (dp); lane j of an 8-wide accumulator sums dimensions
// d ≡ j (mod 8) in increasing order with fused multiply-add; the 8 lanes are then added by one
// fixed tree (hsum8). The AVX-512 and AVX2 kernels and the portable fallback (scan.cpp) all
// follow exactly this order, so they agree bit for bit (and with the CUDA engine, which mirrors
// it).
//
// Layout: rows are stored pair-interleaved, 8 dimensions at a time: element (r, d) lives at
// (r/2)·2·dp + (d/8)·16 + (r%2)·8 + d%8 (an odd row count gets a zero padding row, never
// offered). One 512-bit load holds the same 8-dimension chunk of two rows; a 256-bit load holds
// one row's chunk at row_offset(r) + 16·chunk, which is what the AVX2 and portable paths read.

#include <cstdint>

#include "core/half.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk::cpu_detail {

constexpr int kLanes = 8;

inline std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

// ---------------------------------------------------------------- pair-interleaved layout

// Offset of row r's first 8-dimension chunk; chunk c of the row is at row_offset(r) + 16·c.
inline std::int64_t row_offset(std::int64_t r, std::int64_t dp) { return (r / 2) * 2 * dp + (r % 2) * kLanes; }
inline std::int64_t elem_offset(std::int64_t r, std::int64_t d, std::int64_t dp) {
  return row_offset(r, dp) + (d / kLanes) * 2 * kLanes + d % kLanes;
}

// ---------------------------------------------------------------- fixed-order lane arithmetic

inline float hsum8(const float* l) {
  // The one horizontal-sum tree. Changing it changes every score: keep every path equal
  // (scan.cpp's reduce8x2 is the same tree on 16 pairs at once).
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

// Storage element -> float (portable).
inline float load1(const float* p) { return *p; }
inline float load1(const std::uint16_t* p, Dtype dt) {
  return dt == Dtype::kFloat16 ? half::from_f16(*p) : half::from_bf16(*p);
}

}  // namespace shardtopk::cpu_detail
