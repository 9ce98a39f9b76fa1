#pragma once
// `shardtopk serve`: every rank ingests its shard; rank 0 runs the HTTP front end (cpp-httplib)
// and the micro-batcher; the other ranks follow rank 0's collective searches
// (ShardedIndex::follow). See README "Serving" for the routes and the binary protocol.
#include <string>

#include "shardtopk/config.hpp"

namespace shardtopk::service {

struct ServeOptions {
  /// When set, rank 0 writes the bound TCP port (decimal, newline) here once it listens; for
  /// service.port = 0 (any free port) and for scripts that wait for the service.
  std::string port_file;
};

/// Runs the service on this rank until SIGTERM/SIGINT reaches rank 0 (or mpirun, which forwards
/// it): stop accepting, answer the requests in flight, shut the followers down, return 0 on
/// every rank. MPI must be initialised (MpiSession) with the calling thread as its main thread:
/// every collective is made from it.
/// @throws RemoteError (every rank) when start-up fails on any rank (port taken, bad corpus);
///   CommError when a rank is gone (the caller ends the job).
int serve(const Config& cfg, const ServeOptions& opts);

}  // namespace shardtopk::service
