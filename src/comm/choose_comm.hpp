#pragma once
// The data path's communicator for a rank's engine: MPI on host memory (the CPU engine), NCCL,
// or MPI staged through page-locked host memory (the CUDA engine). Internal header.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "shardtopk/communicator.hpp"
#include "shardtopk/config.hpp"

namespace shardtopk {

class Space;

/// The data communicator for cfg.comm.backend on a rank whose data path lives in `space`:
/// nullptr (use the host communicator) for host memory; NCCL or staged MPI for device memory.
/// comm.backend auto with several GPU ranks measures a batch-1 search's broadcast + all-gather
/// both ways at start-up (median of 30 alternating rounds after 5 warm-ups, rank 0's clock; rank
/// 0 decides for all) and keeps the faster. `query_bytes`: one query; `max_gather_bytes`: the
/// largest block a rank sends in the all-gather. Collective over `host`.
/// @throws Error (through host.check on every rank) when the asked-for backend cannot run.
std::unique_ptr<Communicator> choose_data_comm(const Config& cfg, Communicator& host, Space& space,
                                               std::size_t query_bytes, std::size_t max_gather_bytes);

}  // namespace shardtopk
