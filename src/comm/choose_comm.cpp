#include "shardtopk/communicator.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "comm/staged_comm.hpp"
#include "core/log.hpp"
#include "shardtopk/space.hpp"
#include "shardtopk/ordering.hpp"

namespace shardtopk {
namespace {

using Clock = std::chrono::steady_clock;

// On two NVLink-connected H200s a batch-1 search's broadcast + all-gather took 21-22 us with
// NCCL (collectives replayed from CUDA graphs) against 40-45 us staged through host memory;
// issued eagerly on NCCL's non-blocking communicator they took 147-150 us (docs/PERFORMANCE.md,
// "Two GPUs"). Which one wins depends on the machine, hence the measurement.
// Returns the NCCL communicator when it wins, the staged one otherwise.
std::unique_ptr<Communicator> measure(const Config& cfg, Communicator& host, Space& space, std::size_t query_bytes,
                                      std::size_t max_gather_bytes) {
  const int world = host.world_size();
  auto nccl = make_nccl_communicator(host, space.stream(), space.device(), cfg.comm.timeout_s, cfg.engine.cuda_graphs);
  const std::size_t cbytes = sizeof(Candidate) * 2 * static_cast<std::size_t>(std::min(cfg.search.k_max, 100));
  // Sized for the timing only; the staged communicator of the data path is built if it wins.
  auto staged = make_staged_communicator(host, space, std::max(query_bytes, cbytes));
  // Every rank must enter every host collective below, also after a local failure: a rank that
  // threw straight to the caller's status check would meet the others' barrier or broadcast
  // with its all-reduce, and mismatched MPI collectives end in MPI_ERR_TRUNCATE or garbage
  // instead of the reason. So local steps are guarded, a failed rank skips its remaining local
  // steps but not the collectives, and the failure travels in host.check.
  bool ok = true;
  std::string msg;
  auto local = [&](const std::function<void()>& f) {
    if (!ok) return;
    try {
      f();
    } catch (const std::exception& ex) {
      ok = false;
      msg = ex.what();
    }
  };
  void *q = nullptr, *c = nullptr, *g = nullptr;
  local([&] {
    // Timing buffers with defined bytes (compute-sanitizer initcheck reads NCCL's loads of them).
    q = space.alloc(query_bytes);
    c = space.alloc(cbytes);
    g = space.alloc(cbytes * static_cast<std::size_t>(world));
    std::vector<char> zeros(std::max(query_bytes, cbytes), 0);
    space.from_host(q, zeros.data(), query_bytes, true);
    space.from_host(c, zeros.data(), cbytes, true);
  });
  host.check(ok, msg);
  auto run = [&](Communicator& dc) {
    local([&] {
      dc.broadcast_async(q, query_bytes, 0);
      dc.allgather_async(c, g, cbytes);
      dc.wait("the all-gather (comm.backend auto: timing)");
    });
  };
  // The two alternate round by round, so that a drift in clocks or load over the measurement
  // (the GPU still settling after the upload) weighs on both alike.
  std::vector<double> t_nccl, t_mpi;
  for (int i = 0; i < 35; ++i) {
    for (int which = 0; which < 2; ++which) {
      host.check(ok, msg);  // the barrier; it also ends the timing on every rank after a failure
      const auto t0 = Clock::now();
      run(which == 0 ? *nccl : *staged);
      if (i >= 5) (which == 0 ? t_nccl : t_mpi).push_back(std::chrono::duration<double>(Clock::now() - t0).count() * 1e6);
    }
  }
  host.check(ok, msg);
  auto median = [](std::vector<double>& t) {
    std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
    return t[t.size() / 2];
  };
  const double us_nccl = median(t_nccl), us_mpi = median(t_mpi);
  int pick_nccl = us_nccl <= us_mpi ? 1 : 0;
  host.broadcast(&pick_nccl, sizeof pick_nccl, 0);
  if (host.rank() == 0)
    spdlog::info("comm.backend auto: {} (a batch-1 search's broadcast + all-gather took {:.0f} us with nccl, {:.0f} us "
                 "with mpi staged through host memory)",
                 pick_nccl ? "nccl" : "mpi", us_nccl, us_mpi);
  if (pick_nccl) return nccl;
  nccl.reset();
  return make_staged_communicator(host, space, max_gather_bytes);
}

}  // namespace

std::unique_ptr<Communicator> choose_data_comm(const Config& cfg, Communicator& host, Space& space,
                                               std::size_t query_bytes, std::size_t max_gather_bytes) {
  const bool device = space.kind() == MemSpace::kDevice;
  const int world = host.world_size();
  CommBackend cb = cfg.comm.backend;
  if (cb == CommBackend::kAuto) cb = (device && built_with_nccl()) ? CommBackend::kNccl : CommBackend::kMpi;
  std::unique_ptr<Communicator> dc;
  bool ok = true;
  std::string msg;
  try {
    if (cfg.comm.backend == CommBackend::kAuto && cb == CommBackend::kNccl && world > 1) {
      dc = measure(cfg, host, space, query_bytes, max_gather_bytes);
    } else if (cb == CommBackend::kNccl) {
      SHARDTOPK_EXPECTS(device, "comm.backend 'nccl' needs the CUDA engine (engine.backend 'cuda' or 'auto' with GPUs)");
      dc = make_nccl_communicator(host, space.stream(), space.device(), cfg.comm.timeout_s, cfg.engine.cuda_graphs);
    } else if (device && world > 1) {
      dc = make_staged_communicator(host, space, max_gather_bytes);
    }
  } catch (const CommError&) {
    // A host collective timed out or failed: its request is abandoned (MpiCommunicator::wait),
    // so no further collective may follow on this rank (it would be matched with the abandoned
    // one, or write into its dead stack buffers). End the job with this message.
    throw;
  } catch (const std::exception& e) {
    ok = false;
    msg = e.what();
  }
  host.check(ok, msg);
  return dc;
}

}  // namespace shardtopk
