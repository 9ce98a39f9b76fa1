#pragma once
/// @file communicator.hpp
/// Collectives between ranks: broadcast of the query batch, all-gather of candidates, and a
/// collective status check that carries one rank's error to every rank.
///
/// Implementations: MPI (host buffers), MPI staged through its own page-locked host buffers (device
/// buffers of the CUDA engine without NCCL; src/comm/staged_comm.hpp) and NCCL (device buffers,
/// ordered on the data path's stream). Every collective
/// completes within `timeout_s` or throws `CommTimeout` naming this rank and the collective;
/// after a timeout the communicator is unusable and the job must end (see `abort_job`).

#include <cstddef>
#include <memory>
#include <string>

#include "shardtopk/error.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk {

/// A collective that did not finish in time or failed; the communicator cannot be reused.
class CommError : public Error {
 public:
  explicit CommError(const std::string& what) : Error(what) {}
};

/// Thrown on every rank by `check()` when some rank reported a failure. `what()` holds each
/// failing rank's message prefixed with "rank R: ".
class RemoteError : public Error {
 public:
  RemoteError(const std::string& what, bool local) : Error(what), local_(local) {}
  /// True when this rank was among the failing ones.
  bool local() const { return local_; }

 private:
  bool local_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;  ///< "mpi" or "nccl"
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// Ranks on this node and this rank's index among them (for GPU selection).
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  /// Memory space this communicator's data collectives operate on.
  virtual MemSpace space() const = 0;

  /// Broadcast `bytes` from `root` into `buf` on every rank.
  virtual void broadcast(void* buf, std::size_t bytes, int root) = 0;
  /// Broadcast without a time limit, for a follower waiting for rank 0's next request (a
  /// service may idle for hours). Default: broadcast(). A dead root still ends the job (the
  /// launcher kills the remaining ranks).
  virtual void broadcast_untimed(void* buf, std::size_t bytes, int root) { broadcast(buf, bytes, root); }
  /// All-gather: every rank contributes `bytes` from `send`; `recv` receives world_size × bytes,
  /// rank r's block at offset r × bytes.
  virtual void allgather(const void* send, void* recv, std::size_t bytes) = 0;

  /// Queue-only variants for communicators whose collectives are ordered on a stream (NCCL):
  /// they return once the collective is enqueued; `wait` then blocks until everything queued on
  /// the stream so far has completed, within timeout_s (CommError otherwise, naming `what`).
  /// The host (MPI) communicator completes them at once, and `wait` does nothing.
  /// `root_copy`: on the root, the same bytes in host memory when the caller has them (a staged
  /// communicator sends from there instead of copying `buf` back to the host); ignored elsewhere.
  virtual void broadcast_async(void* buf, std::size_t bytes, int root, const void* root_copy = nullptr) {
    (void)root_copy;
    broadcast(buf, bytes, root);
  }
  virtual void allgather_async(const void* send, void* recv, std::size_t bytes) { allgather(send, recv, bytes); }
  virtual void wait(const char* what) { (void)what; }
  /// True when the data collectives only queue their work on a stream (NCCL): the caller must
  /// wait() before it relies on them having completed.
  virtual bool asynchronous() const { return false; }

  /// Collective status check over the host (always MPI underneath): every rank says whether
  /// it succeeded; if any failed, every rank throws RemoteError carrying the failing ranks'
  /// messages. Returns normally only when all ranks succeeded.
  virtual void check(bool ok, const std::string& message) = 0;

  virtual void barrier() = 0;
  virtual double timeout_s() const = 0;
};

/// MPI_COMM_WORLD-based communicator. Requires MPI to be initialised (see MpiSession).
std::unique_ptr<Communicator> make_mpi_communicator(double timeout_s);

/// NCCL communicator over the same ranks, its collectives ordered on `cuda_stream` (the data
/// path's stream). The ncclUniqueId travels from rank 0 by MPI_Bcast. Uses `host` for
/// check()/barrier(). With `cuda_graphs` (engine.cuda_graphs) each collective is captured in a
/// CUDA graph the first time its (buffers, bytes, root) is seen and replayed from then on (one
/// capture per new shape; a batch-1 broadcast + all-gather then took 21-22 µs on two
/// NVLink-connected H200s, docs/PERFORMANCE.md "Two GPUs"); otherwise
/// every one is issued eagerly. The device buffers and the stream must stay allocated until the
/// communicator is destroyed, and a buffer freed and allocated again at the same address must be
/// treated as the same buffer. @throws Error when built without NCCL.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, void* cuda_stream, int device,
                                                     double timeout_s, bool cuda_graphs = true);

/// True when shardtopk was compiled with NCCL.
bool built_with_nccl();

/// The MPI thread level MpiSession asks for: kFunneled (the programs: MPI from the main thread
/// only), kSerialized (a library such as the Python module, called from any thread, one call at
/// a time).
enum class MpiThreads { kFunneled, kSerialized };

/// RAII MPI_Init_thread / MPI_Finalize. Safe to construct when MPI is already initialised.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv, MpiThreads threads = MpiThreads::kFunneled);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const;
  int world_size() const;

 private:
  bool owns_ = false;
};

/// End every rank of the job now with `exit_code` (MPI_Abort). For errors after which a
/// collective cannot complete (a dead or stalled peer).
[[noreturn]] void abort_job(int exit_code);

class Space;
struct Config;

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
