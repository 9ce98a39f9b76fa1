// `shardtopk serve`: the config and flags of the retrieval service; the service itself
// (src/service/) is called through service::serve alone.
#include <memory>
#include <string>
#include <vector>

#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "common/log.hpp"
#include "service/service.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::cli {
namespace {

struct ServeArgs {
  std::string config;
  std::vector<std::string> overrides;  // key=value
  std::string port_file;
};

int run_serve(const ServeArgs& a, int* argc, char*** argv) {
  MpiSession mpi(argc, argv);
  const int rank = mpi.rank();
  init_logging(rank, mpi.world_size());
  Config cfg;
  try {
    cfg = load_with_overrides(a.config, a.overrides, rank);
  } catch (const Error& e) {
    if (rank == 0) print_error(e.what());
    return 1;
  }
  try {
    service::ServeOptions o;
    o.port_file = a.port_file;
    return service::serve(cfg, o);
  } catch (const std::exception&) {
    return end_job(std::current_exception(), rank);
  }
}

}  // namespace

Command add_serve(CLI::App& top, int* argc, char*** argv) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* c = top.add_subcommand("serve", "serve searches over HTTP on rank 0 (run under mpirun -np P; "
                                            "SIGTERM/SIGINT stops it cleanly)");
  c->add_option("--config,-c", a->config, "YAML config (service.* keys: host, port, ...)")
      ->required()->check(CLI::ExistingFile);
  c->add_option("--set", a->overrides, "override a config key, e.g. --set service.port=9000 (repeatable)");
  c->add_option("--port-file", a->port_file, "write the bound port here once listening (for service.port=0)");
  return {c, [a, argc, argv] { return run_serve(*a, argc, argv); }};
}

}  // namespace shardtopk::cli
