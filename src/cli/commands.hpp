#pragma once
// The `shardtopk` subcommands, one file each (search.cpp, serve.cpp, info.cpp, eval.cpp,
// import.cpp, plan.cpp). add_<name> registers the subcommand and its options on the top-level
// app and returns what to run when it is chosen; main.cpp parses and runs that one.
#include <CLI/CLI.hpp>

#include <functional>

namespace shardtopk::cli {

/// A registered subcommand: call `run` (it returns the process exit code) when `*app` was parsed.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

/// search and serve start MPI (MpiSession) with main's argc/argv.
Command add_search(CLI::App& top, int* argc, char*** argv);
Command add_serve(CLI::App& top, int* argc, char*** argv);
Command add_info(CLI::App& top);
Command add_eval(CLI::App& top);
Command add_import(CLI::App& top);
Command add_plan(CLI::App& top);

}  // namespace shardtopk::cli
