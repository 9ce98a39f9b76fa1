// shardtopk command line: search, serve, info, eval, import, plan (one file each, commands.hpp).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "shardtopk/types.hpp"

int main(int argc, char** argv) {
  using namespace shardtopk;
  CLI::App app{"shardtopk: sharded exact top-k vector search over MPI ranks (CPU or one GPU per rank)"};
  app.set_version_flag("--version", std::string("shardtopk ") + version());
  app.require_subcommand(1);
  const std::vector<cli::Command> commands = {
      cli::add_search(app, &argc, &argv), cli::add_serve(app, &argc, &argv), cli::add_info(app),
      cli::add_eval(app),                 cli::add_plan(app),                cli::add_import(app),
  };

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // Argument errors read like every other error, with the way to the options.
    std::fprintf(stderr, "shardtopk: error: %s\nRun 'shardtopk --help' (or 'shardtopk SUBCOMMAND --help') for the options.\n",
                 e.what());
    return 2;
  }

  try {
    for (const cli::Command& c : commands)
      if (*c.app) return c.run();
    return 2;  // unreachable: require_subcommand(1)
  } catch (const std::exception& e) {
    cli::print_error(e.what());
    return 1;
  }
}
