// NCCL communicator: broadcast and all-gather of device buffers, ordered on the CUDA engine's
// stream, each completing within comm.timeout_s or failing loudly (DESIGN.md invariant 7).
//
// Never hang: the communicator is created non-blocking (ncclConfig_t::blocking = 0), so that
// neither initialisation nor a collective's enqueue (which may set up connections lazily) can
// block the host thread. Every NCCL call is followed by polling ncclCommGetAsyncError until it
// leaves ncclInProgress, and every collective by polling cudaStreamQuery on the stream (plus
// ncclCommGetAsyncError for errors reported by NCCL's proxy thread) until it completes. On an
// error or after timeout_s, the communicator is aborted (ncclCommAbort stops the kernels that
// wait for a dead peer) and CommError names this rank, the collective and the timeout.
//
// Host-side collectives (check, barrier) and the rank layout are delegated to the host (MPI)
// communicator, which also carries the ncclUniqueId from rank 0.

#include <nccl.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>

#include "core/backoff.hpp"
#include "core/cuda_check.cuh"
#include "core/cuda_raii.cuh"
#include "core/log.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk {
namespace {

using Clock = std::chrono::steady_clock;
using cuda_detail::DeviceGuard;

std::string seconds_text(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& host, cudaStream_t stream, int device, double timeout_s, bool cuda_graphs)
      : host_(host), stream_(stream), device_(device), timeout_s_(timeout_s), use_graphs_(cuda_graphs) {
    SHARDTOPK_EXPECTS(timeout_s > 0, "comm.timeout_s must be > 0 (got ", timeout_s, ")");
    // Every rank must reach each host collective below even when its own step failed, or the
    // others would wait in MPI; so failures are collected and reported through host.check().
    bool ok = true;
    std::string msg;
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (host_.rank() == 0) {
      const ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) {
        ok = false;
        msg = detail::concat("ncclGetUniqueId failed: ", ncclGetErrorString(r), " (", last_error(), ")");
      }
    }
    host_.check(ok, msg);
    host_.broadcast(&id, sizeof id, 0);

    try {
      SHARDTOPK_EXPECTS(stream != nullptr, "NCCL communicator: no CUDA stream given (the CUDA engine's stream)");
      CHECK_CUDA(cudaSetDevice(device));
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      const ncclResult_t r = ncclCommInitRankConfig(&comm_, host_.world_size(), id, host_.rank(), &config);
      if (r != ncclSuccess && r != ncclInProgress) {
        if (comm_) abort_comm();
        fail("ncclCommInitRank", r);
      }
      const auto start = Clock::now();
      wait_ready("ncclCommInitRank", start);
      warm_up();
    } catch (const std::exception& e) {
      ok = false;
      msg = e.what();
    }
    try {
      host_.check(ok, msg);
    } catch (...) {
      abort_comm();  // another rank failed: the destructor will not run for a throwing constructor
      throw;
    }
  }

  ~NcclCommunicator() override {
    drop_graphs();
    if (!comm_) return;
    // Finalize flushes outstanding work and waits for the peers to finish with this
    // communicator; bounded by timeout_s, after which (or on any error) we abort instead.
    try {
      DeviceGuard guard(device_);
      const ncclResult_t r = ncclCommFinalize(comm_);
      if (r == ncclSuccess || r == ncclInProgress) {
        const auto start = Clock::now();
        ncclResult_t state = ncclInProgress;
        while (state == ncclInProgress && elapsed_s(start) < timeout_s_) {
          if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
          if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        if (state == ncclSuccess) {
          (void)ncclCommDestroy(comm_);
          comm_ = nullptr;
          return;
        }
      }
    } catch (...) {
      // fall through to abort; a destructor never throws
    }
    abort_comm();
  }

  std::string name() const override { return "nccl"; }
  int rank() const override { return host_.rank(); }
  int world_size() const override { return host_.world_size(); }
  int local_rank() const override { return host_.local_rank(); }
  int local_size() const override { return host_.local_size(); }
  MemSpace space() const override { return MemSpace::kDevice; }
  double timeout_s() const override { return timeout_s_; }

  /// In-place broadcast of buf [bytes] (device) from `root`, ordered on the engine's stream;
  /// returns when it has completed on this rank. @throws CommError on error or timeout.
  void broadcast(void* buf, std::size_t bytes, int root) override {
    broadcast_async(buf, bytes, root);
    wait("ncclBroadcast");
  }

  /// All-gather of send [bytes] (device) into recv [world_size × bytes] (device), rank r's
  /// block at offset r × bytes, ordered on the engine's stream; returns when it has completed
  /// on this rank. @throws CommError on error or timeout.
  void allgather(const void* send, void* recv, std::size_t bytes) override {
    allgather_async(send, recv, bytes);
    wait("ncclAllGather");
  }

  /// Enqueues the broadcast on the engine's stream and returns (wait() completes it).
  void broadcast_async(void* buf, std::size_t bytes, int root, const void* /*root_copy*/ = nullptr) override {
    SHARDTOPK_EXPECTS(root >= 0 && root < world_size(), "broadcast: root ", root, " out of range: allowed 0 .. ",
                      world_size() - 1);
    usable("ncclBroadcast");
    if (bytes == 0) return;
    DeviceGuard guard(device_);
    issue(GraphKey{0, buf, buf, bytes, root}, "ncclBroadcast",
          [&] { return ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, stream_); });
  }

  /// Enqueues the all-gather on the engine's stream and returns (wait() completes it).
  void allgather_async(const void* send, void* recv, std::size_t bytes) override {
    usable("ncclAllGather");
    if (bytes == 0) return;
    DeviceGuard guard(device_);
    issue(GraphKey{1, send, recv, bytes, 0}, "ncclAllGather",
          [&] { return ncclAllGather(send, recv, bytes, ncclUint8, comm_, stream_); });
  }

  /// Waits until all work queued on the engine's stream has completed (collectives and the
  /// kernels around them), polling NCCL's asynchronous errors, within timeout_s.
  void wait(const char* what) override {
    usable(what);
    DeviceGuard guard(device_);
    const auto start = Clock::now();
    for (long spins = 0;; ++spins) {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) {
        (void)cudaGetLastError();
        abort_comm();
        throw CommError(prefix() + what + " failed: CUDA " + cudaGetErrorName(q) + " (" + cudaGetErrorString(q) +
                        ") on device " + std::to_string(device_));
      }
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) fail(what, r);
      if (state != ncclSuccess && state != ncclInProgress) fail(what, state);
      if (elapsed_s(start) > timeout_s_) timed_out(what);
      poll_backoff(spins, start);
    }
  }

  bool asynchronous() const override { return true; }

  void check(bool ok, const std::string& message) override { host_.check(ok, message); }
  void barrier() override { host_.barrier(); }

 private:
  static const char* last_error() {
    const char* s = ncclGetLastError(nullptr);
    return s && *s ? s : "no detail";
  }

  static double elapsed_s(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  std::string prefix() const { return "rank " + std::to_string(host_.rank()) + ": "; }

  /// After a failure the communicator cannot be reused (peers may be mid-collective).
  void usable(const char* what) const {
    if (!comm_)
      throw CommError(prefix() + what + ": the NCCL communicator was aborted after an earlier failure; the job must end");
  }

  void abort_comm() noexcept {
    if (!comm_) return;
    (void)cudaSetDevice(device_);
    drop_graphs();
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  [[noreturn]] void fail(const char* what, ncclResult_t r) {
    const std::string detail = last_error();
    abort_comm();
    throw CommError(prefix() + what + " failed: " + ncclGetErrorString(r) + " (" + detail + ")");
  }

  [[noreturn]] void timed_out(const char* what) {
    abort_comm();
    throw CommError(prefix() + what + " did not complete within " + seconds_text(timeout_s_) +
                    " s (comm.timeout_s); a peer rank is stalled or dead");
  }

  /// Polls until the communicator leaves ncclInProgress (a non-blocking init or enqueue).
  void wait_ready(const char* what, Clock::time_point start) {
    const ncclResult_t r = poll_ready(start);
    if (r == ncclInProgress) timed_out(what);
    if (r != ncclSuccess) fail(what, r);
  }

  /// Polls until the communicator leaves ncclInProgress or timeout_s has passed since `start`,
  /// without aborting: ncclSuccess, the error, or ncclInProgress for a timeout. The caller
  /// releases what it holds (a graph under capture) before it aborts.
  ncclResult_t poll_ready(Clock::time_point start) {
    for (long spins = 0;; ++spins) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) return r;
      if (state != ncclInProgress) return state;
      if (elapsed_s(start) > timeout_s_) return ncclInProgress;
      poll_backoff(spins, start);
    }
  }

  /// Completes the enqueue of the collective just issued (a non-blocking communicator may
  /// answer ncclInProgress while it sets up connections).
  void enqueued(const char* what, ncclResult_t issued, Clock::time_point start) {
    if (issued != ncclSuccess && issued != ncclInProgress) fail(what, issued);
    wait_ready(what, start);
  }

  /// One tiny all-gather and one broadcast at start-up, issued eagerly: connections are set up
  /// now (within the timeout, while every rank is known to be alive) instead of lazily during
  /// the first search, and before any collective is captured in a graph (issue()).
  void warm_up() {
    const std::size_t n = 16;
    cuda_detail::DeviceBuffer owned;
    owned.allocate(n * static_cast<std::size_t>(world_size()));
    void* buf = owned.get();
    CHECK_CUDA(cudaMemsetAsync(buf, 0, n * static_cast<std::size_t>(world_size()), stream_));
    char* base = static_cast<char*>(buf);
    warming_up_ = true;  // eager: these two are not replayed later
    struct Done {
      bool& f;
      ~Done() { f = false; }
    } done{warming_up_};
    allgather(base + n * static_cast<std::size_t>(rank()), base, n);
    broadcast(base, n, 0);
  }

  /// One collective on fixed buffers: op (0 broadcast, 1 all-gather), send, recv, bytes, root.
  using GraphKey = std::tuple<int, const void*, void*, std::size_t, int>;

  /// Enqueues one collective (`call` issues it on stream_). Issued eagerly on this non-blocking
  /// communicator, a batch-1 search's broadcast + all-gather took 147-150 us host to host on two
  /// NVLink-connected H200s, and 8 ms when the rank was bound to one core (NCCL's enqueue of a
  /// non-blocking communicator goes through its background thread); replayed from CUDA graphs
  /// they took 25-28 us (docs/PERFORMANCE.md, "Two GPUs"). So each (op, buffers, bytes, root) is
  /// captured in a graph the first time it is seen and replayed from then on; warm_up() has
  /// already run both collectives eagerly, so NCCL's connections exist before any capture. The
  /// enqueue of a capture is completed like an eager one (wait_ready). If capturing fails, graphs
  /// are off for this communicator (logged once) and collectives run eagerly.
  /// engine.cuda_graphs: false turns graphs off. The cache holds at most 256 graphs (cleared when full).
  template <typename Call>
  void issue(const GraphKey& key, const char* what, const Call& call) {
    const auto start = Clock::now();
    cudaGraphExec_t exec = nullptr;
    if (use_graphs_ && !warming_up_) {
      auto it = replays_.find(key);
      if (it != replays_.end()) {
        exec = it->second;
      } else if ((exec = capture(what, call, start)) != nullptr) {
        if (replays_.size() >= 256) drop_graphs();
        replays_.emplace(key, exec);
      }
    }
    if (!exec) {
      enqueued(what, call(), start);
      return;
    }
    const cudaError_t e = cudaGraphLaunch(exec, stream_);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      abort_comm();
      throw CommError(prefix() + what + ": cudaGraphLaunch failed: " + cudaGetErrorName(e) + " (" +
                      cudaGetErrorString(e) + ") on device " + std::to_string(device_));
    }
  }

  /// Captures call() into a graph and returns it; nullptr (graphs now off) if that failed. An
  /// error returned by the call under capture turns graphs off instead of failing the job: the
  /// caller issues the collective once more, eagerly, and that one fails loudly if it must.
  template <typename Call>
  cudaGraphExec_t capture(const char* what, const Call& call, Clock::time_point start) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    std::string why;
    if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      why = cudaGetErrorString(cudaGetLastError());
    } else {
      const ncclResult_t r = call();
      const ncclResult_t ready = r == ncclInProgress ? poll_ready(start) : ncclSuccess;
      cudaError_t e = cudaStreamEndCapture(stream_, &g);
      if (ready != ncclSuccess) {
        // The enqueue failed or timed out: the communicator is unusable and the job ends. The
        // half-built graph goes first: NCCL ties a captured plan to the communicator, and
        // ncclCommAbort waits for every such graph to be destroyed.
        if (g) (void)cudaGraphDestroy(g);
        (void)cudaGetLastError();
        if (ready == ncclInProgress) timed_out(what);
        fail(what, ready);
      }
      if (r != ncclSuccess && r != ncclInProgress) {
        why = std::string(ncclGetErrorString(r)) + ": " + last_error();
      } else if (e == cudaSuccess) {
        e = cudaGraphInstantiate(&exec, g, 0);
        if (e != cudaSuccess) exec = nullptr;
      }
      if (g) (void)cudaGraphDestroy(g);
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        why = cudaGetErrorString(e);
      }
    }
    if (!exec) {
      spdlog::warn("rank {}: {} could not be captured in a CUDA graph ({}); NCCL collectives run eagerly from now on",
                   host_.rank(), what, why);
      drop_graphs();
      use_graphs_ = false;
    }
    return exec;
  }

  void drop_graphs() noexcept {
    for (auto& kv : replays_) (void)cudaGraphExecDestroy(kv.second);
    replays_.clear();
  }

  Communicator& host_;
  cudaStream_t stream_;
  int device_;
  double timeout_s_;
  ncclComm_t comm_ = nullptr;
  bool use_graphs_ = true;
  bool warming_up_ = false;  // warm_up(): collectives issued eagerly, never captured
  std::map<GraphKey, cudaGraphExec_t> replays_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, void* cuda_stream, int device,
                                                     double timeout_s, bool cuda_graphs) {
  return std::make_unique<NcclCommunicator>(host, static_cast<cudaStream_t>(cuda_stream), device, timeout_s,
                                            cuda_graphs);
}

bool built_with_nccl() { return true; }

}  // namespace shardtopk
