#pragma once
/// @file bench_main.hpp
/// The one driver behind bench_search and bench_scaling: they differ only in their default
/// sweep and their table (kernel view vs scaling view); flags, checks and JSON are shared.

#include "harness.hpp"

namespace shardtopk::bench {

enum class View { kSearch, kScaling };

/// Runs the sweep under MPI; returns the process exit code (non-zero when any answer was wrong
/// or a configuration failed).
int bench_main(int argc, char** argv, const char* program, const char* about, Options defaults, View view);

}  // namespace shardtopk::bench
