#pragma once
// Logging: spdlog with a pattern that names the rank. Rank 0 logs at info, others at warn,
// unless SHARDTOPK_LOG_LEVEL (trace|debug|info|warn|error|off) says otherwise.
#include <spdlog/spdlog.h>

namespace shardtopk {
/// Set up the default logger for this rank (idempotent).
void init_logging(int rank, int world_size);
/// True when SHARDTOPK_LOG_LEVEL is set (programs with a quieter default keep the user's level).
bool log_level_from_environment();
}  // namespace shardtopk
