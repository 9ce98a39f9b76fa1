#pragma once
// Logging: spdlog with a pattern that names the rank. Rank 0 logs at info, others at warn,
// unless SHARDTOPK_LOG_LEVEL (trace|debug|info|warn|error|off) says otherwise.
#include <spdlog/spdlog.h>

namespace shardtopk {
/// Set up the default logger for this rank (idempotent).
void init_logging(int rank, int world_size);
}  // namespace shardtopk
