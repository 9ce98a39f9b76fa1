#include "core/log.hpp"

#include <atomic>
#include <cstdlib>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace shardtopk {
namespace {
std::atomic<bool> warned_bad_level{false};
}  // namespace

bool log_level_from_environment() {
  const char* lvl = std::getenv("SHARDTOPK_LOG_LEVEL");
  return lvl && *lvl;
}

void init_logging(int rank, int world_size) {
  auto logger = spdlog::get("shardtopk");
  if (!logger) logger = spdlog::stderr_color_mt("shardtopk");
  spdlog::set_default_logger(logger);
  const std::string who = world_size > 1 ? "[rank " + std::to_string(rank) + "] " : "";
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] " + who + "%v");
  spdlog::set_level(rank == 0 ? spdlog::level::info : spdlog::level::warn);
  if (const char* lvl = std::getenv("SHARDTOPK_LOG_LEVEL")) {
    const auto level = spdlog::level::from_str(lvl);
    // from_str answers "off" for anything it does not know: only accept real names
    if (level != spdlog::level::off || std::string(lvl) == "off") {
      spdlog::set_level(level);
    } else if (rank == 0 && !warned_bad_level.exchange(true)) {
      // init_logging runs more than once per process (command, then index): warn once.
      spdlog::warn("SHARDTOPK_LOG_LEVEL='{}' is not a level (trace, debug, info, warn, error, critical, off); ignored",
                   lvl);
    }
  }
}

}  // namespace shardtopk
