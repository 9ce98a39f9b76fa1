#include "cli/cli_util.hpp"

#include <cstdio>

#include "core/log.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::cli {

Config load_with_overrides(const std::string& path, const std::vector<std::string>& overrides, int rank) {
  Config cfg = load_config(path);
  for (const auto& kv : overrides) apply_override(cfg, kv);
  validate(cfg);
  if (rank == 0)
    for (const std::string& w : cfg.warnings) spdlog::warn("{}", w);
  return cfg;
}

void print_error(const char* message) { std::fprintf(stderr, "shardtopk: error: %s\n", message); }

int end_job(std::exception_ptr err, int rank) {
  try {
    std::rethrow_exception(err);
  } catch (const CommError& e) {
    print_error(e.what());
    abort_job(2);
  } catch (const RemoteError& e) {
    if (rank == 0) print_error(e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardtopk: error: rank %d: %s\n", rank, e.what());
    abort_job(1);
  }
}

}  // namespace shardtopk::cli
