#pragma once
// `shardtopk serve`: every rank ingests its shard; rank 0 runs the HTTP front end
// (http_front_end.hpp) and the micro-batcher (batcher.hpp) over the index (search_backend.hpp);
// the other ranks follow rank 0's collective searches (ShardedIndex::follow) and keep a
// liveness connection to it (liveness.hpp). docs/SERVING.md has the routes, the binary
// protocol, the limits and the errors.
#include <string>

#include "shardtopk/config.hpp"

namespace shardtopk::service {

struct ServeOptions {
  /// When set, rank 0 writes the bound TCP port (decimal, newline) here once it listens; for
  /// service.port = 0 (any free port) and for scripts that wait for the service.
  std::string port_file;
};

/// Runs the service on this rank until SIGTERM/SIGINT reaches rank 0 (or mpirun, which forwards
/// it). Then rank 0 drains: it stops accepting connections, completes and answers the requests
/// being received or queued (those still being received after service.drain_timeout_s are
/// cut), closes every connection, shuts the followers down, and every rank returns 0.
/// A lost rank (its liveness connection closed or silent, or a collective failed) ends the job
/// instead, after every accepted request got a 503 naming the rank: rank 0 exits 3 (detected by
/// liveness) or 2 (by a collective), and the launcher ends the other ranks.
/// MPI must be initialised (MpiSession) with the calling thread as its main thread: every
/// collective is made from it.
/// @throws RemoteError (every rank) when start-up fails on any rank (port taken, bad corpus).
int serve(const Config& cfg, const ServeOptions& opts);

}  // namespace shardtopk::service
