#pragma once
/// @file shard_plan.hpp
/// Which global rows a rank owns: a balanced contiguous split.

#include <cstdint>

namespace shardtopk {

/// Half-open global row range [lo, hi).
struct RowRange {
  std::int64_t lo = 0;
  std::int64_t hi = 0;
  std::int64_t size() const { return hi - lo; }
};

/// Rows of `rank` when `n_rows` rows are split over `world_size` ranks: the first
/// `n_rows % world_size` ranks get one row more. More ranks than rows gives empty shards.
/// @throws Error when world_size < 1, rank outside [0, world_size) or n_rows < 0.
RowRange shard_rows(std::int64_t n_rows, int world_size, int rank);

}  // namespace shardtopk
