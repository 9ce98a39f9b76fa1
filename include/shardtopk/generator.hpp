#pragma once
/// @file generator.hpp
/// A seeded corpus generator that host and device code evaluate identically, so that every rank
/// count sees the same corpus, huge corpora need no file, and a float64 oracle can rebuild any
/// row on the host (bench_scaling, tests of the CUDA engine's generated shards).
///
/// Value of (row, col): the sum of four 16-bit uniforms taken from splitmix64(seed, row, col),
/// centred and scaled by 2^-15: an Irwin–Hall approximation of a normal with standard deviation
/// 65536 / sqrt(3) · 2^-15 ≈ 1.155. Every value is an integer multiple of 2^-15 with magnitude
/// below 4, so it is exact in float32; storage as float16/bfloat16 rounds it to nearest even, as
/// for any other float32 corpus. Source of splitmix64: Steele, Lea, Flood, "Fast splittable
/// pseudorandom number generators", OOPSLA 2014.

#include <cstdint>

#include "shardtopk/ordering.hpp"  // SHARDTOPK_HD

namespace shardtopk {

/// splitmix64 finaliser of x (one step of the generator, without the state increment).
SHARDTOPK_HD std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// The generated corpus value at (global row, column) for `seed`, in float32 (exact).
SHARDTOPK_HD float generated_value(std::uint64_t seed, std::int64_t row, std::int64_t col) {
  const std::uint64_t h = splitmix64(splitmix64(seed ^ (static_cast<std::uint64_t>(row) * 0xD1B54A32D192ED03ull)) +
                                     static_cast<std::uint64_t>(col));
  const std::int64_t s = static_cast<std::int64_t>(h & 0xFFFF) + static_cast<std::int64_t>((h >> 16) & 0xFFFF) +
                         static_cast<std::int64_t>((h >> 32) & 0xFFFF) + static_cast<std::int64_t>(h >> 48) -
                         131070;  // 2 × 65535: centred, range [-131070, 131070]
  return static_cast<float>(s) * (1.0f / 32768.0f);
}

/// Materialise generated rows on the host: out [rows, dim] row-major receives
/// generated_value(seed, first_row + i, j). Split over `threads` threads by rows (0: hardware
/// concurrency); the values do not depend on the thread count. Implemented in
/// src/core/generator.cpp (host only).
void generate_rows(std::uint64_t seed, std::int64_t first_row, std::int64_t rows, std::int64_t dim, float* out,
                   int threads = 0);

}  // namespace shardtopk
