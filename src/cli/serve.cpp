// `shardtopk serve`: the config and flags of the retrieval service; the service itself
// (src/service/) is called through service::serve alone.
#include <string>
#include <vector>

#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "core/log.hpp"
#include "service/service.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::cli {

int run_serve(const ServeArgs& a, int* argc, char*** argv) {
  end_with_launcher();
  MpiSession mpi(argc, argv);
  const int rank = mpi.rank();
  init_logging(rank, mpi.world_size());
  Config cfg;
  try {
    cfg = load_with_overrides(a.config, a.overrides, rank);
    check_corpus_path_for_startup(cfg);  // before the port opens: every rank alike, rank 0 speaks
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

}  // namespace shardtopk::cli
