#pragma once
// MPI collectives on device buffers, staged through the communicator's own page-locked host
// buffers: the data path of the CUDA engine when NCCL is not used (comm.backend mpi, or auto when
// MPI measured faster). Internal header.

#include <cstddef>
#include <memory>

#include "shardtopk/communicator.hpp"

namespace shardtopk {

class Space;

/// Data collectives over `host` (MPI) on buffers of `space` (a GPU): broadcast copies the root's
/// bytes to the host (or sends the root's host copy when given), broadcasts them and copies them
/// into the buffer on every other rank; all-gather copies each rank's block to the host, gathers
/// and copies the result back. Each call returns once its bytes are in place (the copies back to
/// the device are queued on the space's stream, which later work follows). `max_bytes`: the
/// largest block one rank sends (the staging buffers are sized once: max_bytes and
/// world_size × max_bytes). check/barrier/timeouts are the host communicator's.
/// @throws Error when a block exceeds max_bytes or the memory cannot be had.
std::unique_ptr<Communicator> make_staged_communicator(Communicator& host, Space& space, std::size_t max_bytes);

}  // namespace shardtopk
