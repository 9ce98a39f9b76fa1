#include "shardtopk/shard_plan.hpp"

#include "shardtopk/error.hpp"

namespace shardtopk {

RowRange shard_rows(std::int64_t n_rows, int world_size, int rank) {
  SHARDTOPK_EXPECTS(world_size >= 1, "shard plan: world size must be >= 1, got ", world_size);
  SHARDTOPK_EXPECTS(rank >= 0 && rank < world_size, "shard plan: rank ", rank,
                    " outside [0, ", world_size, ")");
  SHARDTOPK_EXPECTS(n_rows >= 0, "shard plan: row count must be >= 0, got ", n_rows);
  const std::int64_t base = n_rows / world_size;
  const std::int64_t extra = n_rows % world_size;
  RowRange r;
  r.lo = rank * base + (rank < extra ? rank : extra);
  r.hi = r.lo + base + (rank < extra ? 1 : 0);
  return r;
}

}  // namespace shardtopk
