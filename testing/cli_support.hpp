#pragma once
// Running the built `shardtopk` binary from a test (test_cli, test_cli_inputs): one shell
// command with its stdout, stderr, exit status and wall time, and the mpiexec prefix for P
// ranks. The targets that include this define SHARDTOPK_BIN and SHARDTOPK_MPIEXEC* (CMake).
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "test_support.hpp"

namespace shardtopk::test {

struct CmdResult {
  int rc = -1;
  std::string out, err;
  double seconds = 0;
};

/// Runs `cmd` through the shell with stdout and stderr captured in files of `dir`; prints the
/// command, its exit status and time (and its stderr when `echo_err`).
inline CmdResult run_command(const std::string& cmd, const TempDir& dir, bool echo_err) {
  CmdResult r;
  const std::string out = dir.file("stdout.txt"), err = dir.file("stderr.txt");
  const auto t0 = std::chrono::steady_clock::now();
  const int st = std::system((cmd + " >" + out + " 2>" + err + " </dev/null").c_str());
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  r.out = read_text(out);
  r.err = read_text(err);
  std::printf("$ %s\n  -> exit %d in %.2f s\n%s", cmd.c_str(), r.rc, r.seconds, echo_err ? r.err.c_str() : "");
  return r;
}

#if defined(SHARDTOPK_MPIEXEC) && defined(SHARDTOPK_BIN)
/// `mpiexec -n P [flags] shardtopk` (append the command and its arguments).
inline std::string mpi_prefix(int ranks) {
  return std::string(SHARDTOPK_MPIEXEC) + " " + SHARDTOPK_MPIEXEC_NUMPROC_FLAG + " " + std::to_string(ranks) + " " +
         SHARDTOPK_MPIEXEC_FLAGS + " " + SHARDTOPK_BIN;
}
#endif

}  // namespace shardtopk::test
