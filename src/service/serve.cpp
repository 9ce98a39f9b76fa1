// The serve loop: start-up on every rank, then rank 0's three roles.
//
// Threads on rank 0: the HTTP event loops (http_front_end.cpp) parse requests and queue jobs;
// the main thread, the only one that makes MPI calls (MPI_THREAD_FUNNELED), runs the Batcher's
// searches; the supervisor thread (here) watches the stop signals and the followers' liveness
// connections and runs the drain or the failure. Followers run ShardedIndex::follow on their
// main thread and a heartbeat thread.
#include "service/service.hpp"

#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>

#include "core/log.hpp"
#include "service/batcher.hpp"
#include "service/exposure.hpp"
#include "service/http_front_end.hpp"
#include "service/index_backend.hpp"
#include "service/liveness.hpp"
#include "service/metrics.hpp"
#include "service/write_backend.hpp"
#include "shardtopk/ingest.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/index.hpp"

namespace shardtopk::service {
namespace {

using Clock = std::chrono::steady_clock;

// ------------------------------------------------------------------------------ signals

volatile sig_atomic_t g_stop = 0;
volatile sig_atomic_t g_reload = 0;
int g_signal_pipe[2] = {-1, -1};  // the handlers write a byte; the supervisor polls the read end

extern "C" void on_stop_signal(int) {
  g_stop = 1;
  if (g_signal_pipe[1] >= 0) {
    const char x = 's';
    (void)!::write(g_signal_pipe[1], &x, 1);
  }
}

// SIGHUP: rank 0 reloads the keys file and reopens the audit log; other ranks ignore it (its
// default action would end the process).
extern "C" void on_reload_signal(int) {
  g_reload = 1;
  if (g_signal_pipe[1] >= 0) {
    const char x = 'h';
    (void)!::write(g_signal_pipe[1], &x, 1);
  }
}

// Empties the signal pipe (its bytes only wake the supervisor; the flags say what came).
void drain_signal_pipe() {
  char buf[64];
  while (g_signal_pipe[0] >= 0 && ::read(g_signal_pipe[0], buf, sizeof buf) > 0) {
  }
}

void install_signal_handlers(bool with_pipe) {
  if (with_pipe && g_signal_pipe[0] < 0 && ::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    g_signal_pipe[0] = g_signal_pipe[1] = -1;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sa.sa_handler = on_reload_signal;
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that disconnects must not end the process
}

// ------------------------------------------------------------------------------ supervisor

// Watches the stop signal and the followers on its own thread; runs the drain (Go's
// http.Server.Shutdown, nginx's graceful stop) or, when a rank is lost, answers everything 503
// and ends the job.
class Supervisor {
 public:
  Supervisor(const ServiceConfig& cfg, HttpFrontEnd& fe, Batcher& batcher, LivenessMonitor* live, Metrics& metrics)
      : cfg_(cfg), fe_(fe), batcher_(batcher), live_(live), metrics_(metrics) {}
  ~Supervisor() { join(); }

  void start() {
    if (live_) live_->arm();
    thread_ = std::thread([this] { loop(); });
  }
  void join() {
    if (thread_.joinable()) thread_.join();
  }

  // Answers every accepted request 503 naming `why` (Connection: close), waits briefly for the
  // answers to leave, then ends the job with `exit_code`. The first caller ends the process;
  // a second one (the other thread, racing) waits for that.
  [[noreturn]] void fail_and_exit(const std::string& why, int exit_code, bool on_mpi_thread) {
    static std::atomic<bool> once{false};
    if (once.exchange(true))
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    spdlog::error("{}: answering every request 503 and ending the job", why);
    fe_.fail(why);
    batcher_.fail_all(503, why);
    // Flushes the 503s; requests still being received get theirs when their body completes.
    const bool flushed = fe_.wait_idle(Clock::now() + std::chrono::seconds(1));
    if (!flushed) spdlog::warn("{} request(s) still in progress (being received or sending)", fe_.in_progress());
    std::fprintf(stderr, "shardtopk: error: %s\n", why.c_str());
    std::fflush(nullptr);
    if (on_mpi_thread) abort_job(exit_code);
    // The main thread may be inside a collective that waits for the lost rank: end the process
    // from here. The launcher sees rank 0 exit non-zero and ends the other ranks.
    std::_Exit(exit_code);
  }

 private:
  void loop() {
    auto last_summary = Clock::now();
    for (;;) {
      bool signalled = false;
      std::string lost;
      if (live_) {
        lost = live_->poll(std::max(10, std::min(cfg_.heartbeat_ms, 200)), g_signal_pipe[0], &signalled);
      } else {
        pollfd p{g_signal_pipe[0], POLLIN, 0};
        signalled = ::poll(&p, g_signal_pipe[0] >= 0 ? 1 : 0, 200) > 0;
      }
      if (!lost.empty()) fail_and_exit(lost, 3, /*on_mpi_thread=*/false);
      if (signalled) drain_signal_pipe();
      if (g_reload) {
        g_reload = 0;
        fe_.reload();
      }
      if (g_stop) {
        drain();
        return;
      }
      if (Clock::now() - last_summary >= std::chrono::seconds(60)) {
        last_summary = Clock::now();
        metrics_.log_minute();
      }
    }
  }

  void drain() {
    const auto t0 = Clock::now();
    spdlog::info("stop signal: draining (no new connections; requests being received or queued are completed, for "
                 "at most service.drain_timeout_s = {} s)",
                 cfg_.drain_timeout_s);
    fe_.begin_drain();
    const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(cfg_.drain_timeout_s));
    if (!fe_.wait_idle(deadline)) {
      // Past the drain timeout: what no search has taken yet is answered 503; the running batch
      // finishes (bounded by comm.timeout_s like every search); requests still being received
      // are cut when the connections close.
      const int left = fe_.in_progress();
      batcher_.fail_queued(503, "shutting down: not searched within service.drain_timeout_s");
      if (!fe_.stop(Clock::now() + std::chrono::seconds(30))) {
        batcher_.fail_all(503, "shutting down");
        fe_.stop(Clock::now() + std::chrono::seconds(5));
      }
      spdlog::warn("drain timeout: {} request(s) still in progress were cut or answered 503", left);
    } else {
      fe_.stop(Clock::now() + std::chrono::seconds(5));
    }
    batcher_.close();
    spdlog::info("drained in {:.3f} s", std::chrono::duration<double>(Clock::now() - t0).count());
  }

  const ServiceConfig& cfg_;
  HttpFrontEnd& fe_;
  Batcher& batcher_;
  LivenessMonitor* live_;
  Metrics& metrics_;
  std::thread thread_;
};

void write_port_file(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << port << "\n";
  SHARDTOPK_EXPECTS(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot write --port-file '", path, "'");
}

}  // namespace

int serve(const Config& cfg, const ServeOptions& opts) {
  std::unique_ptr<Communicator> comm = make_mpi_communicator(cfg.comm.timeout_s);
  const int rank = comm->rank(), world = comm->world_size();
  install_signal_handlers(/*with_pipe=*/rank == 0);
  init_logging(rank, world);

  // Rank 0 binds first, so a taken port fails the job before a long ingest.
  Metrics metrics;
  std::unique_ptr<HttpFrontEnd> fe;
  std::unique_ptr<LivenessMonitor> live;
  LivenessAddress addr;
  bool ok = true;
  std::string msg;
  if (rank == 0) {
    try {
      if (cfg.service.threads != 0)
        spdlog::warn("service.threads = {} is deprecated and ignored: connections are served by "
                     "service.io_threads = {} event-loop thread(s)",
                     cfg.service.threads, cfg.service.io_threads);
      // Secure by default: a writable service beyond loopback needs keys (or an explicit yes).
      const bool loopback = host_is_loopback(cfg.service.host);
      check_exposure(cfg, loopback);
      fe = std::make_unique<HttpFrontEnd>(cfg.service, metrics);
      for (const std::string& w : exposure_warnings(cfg, loopback)) spdlog::warn("{}", w);
      const std::vector<std::string> sec = fe->security_summary();
      for (std::size_t i = 0; i < sec.size(); ++i) {
        if (i < 3) spdlog::info("security: {}", sec[i]);
        else spdlog::warn("security: {}", sec[i]);
      }
      fe->bind();
      if (!opts.port_file.empty()) write_port_file(opts.port_file, fe->port());
      fe->start();  // /healthz answers now, /readyz says 503 until every rank has ingested
      if (world > 1) {
        live = std::make_unique<LivenessMonitor>(world, comm->local_size() == world, cfg.service.heartbeat_timeout_ms);
        addr = live->address();
      }
      spdlog::info("listening on {}://{}:{} (ready once every rank has ingested)", fe->scheme(), cfg.service.host,
                   fe->port());
    } catch (const std::exception& e) {
      ok = false;
      msg = e.what();
    }
  }
  comm->check(ok, msg);
  std::unique_ptr<Heartbeat> heartbeat;
  if (world > 1) {
    comm->broadcast(&addr, sizeof addr, 0);
    if (rank != 0) {
      try {
        heartbeat = std::make_unique<Heartbeat>(addr, rank, cfg.service.heartbeat_ms, cfg.comm.timeout_s);
      } catch (const std::exception& e) {
        ok = false;
        msg = e.what();
      }
    }
    comm->check(ok, msg);
  }
  comm.reset();

  std::unique_ptr<ShardedIndex> index = load_index(cfg);
  if (rank != 0) {
    index->follow();  // SIGTERM/SIGINT here only set a flag: rank 0 decides when to stop
    if (heartbeat) heartbeat->goodbye();
    spdlog::info("rank {}: shut down by rank 0", rank);
    return 0;
  }

#ifdef M_MMAP_THRESHOLD
  // Request bodies and parsed rows are allocated per request: a fixed mmap threshold (glibc
  // otherwise raises it to the largest block freed) gives their memory back to the system when
  // they are freed, so a burst of large requests does not leave rank 0's resident size high.
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
#endif
  std::unique_ptr<SearchBackend> backend = make_index_backend(*index);
  std::unique_ptr<WriteBackend> writer = make_index_writer(*index);
  const BackendInfo info = backend->info();
  Batcher::Options bo;
  bo.batch_max = info.batch_max;
  bo.k_max = info.k_max;
  bo.max_filters = info.max_filters;
  bo.dim = info.dim;
  bo.window = std::chrono::microseconds(cfg.service.batch_window_us);
  bo.poll = std::chrono::microseconds(cfg.service.poll_us);
  bo.commit_writes = [&writer] { writer->commit(); };
  bo.after_writes = [&writer] { writer->after_commit(); };
  bo.background = [&writer] { return writer->background(); };
  Batcher batcher(*backend, bo, &metrics);
  metrics.set_extra([&writer] { return writer->metrics(); });
  fe->set_writer(writer.get());
  fe->set_ready(info, *backend, batcher);
  spdlog::info("ready: {}://{}:{}/v1/search (batch window {} us, batch_max {}, k_max {}); {}", fe->scheme(),
               cfg.service.host, fe->port(), cfg.service.batch_window_us, info.batch_max, info.k_max, fe->limits_summary());
  Supervisor supervisor(cfg.service, *fe, batcher, live.get(), metrics);
  supervisor.start();
  try {
    batcher.run();
  } catch (const RankLost& e) {
    // A collective failed. When a follower died, its liveness connection says which one: give
    // the supervisor a moment to name it (it then ends the job itself) before using the
    // collective's own message.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(500, 3 * cfg.service.heartbeat_ms)));
    supervisor.fail_and_exit(std::string("a rank is gone: ") + e.what(), 2, /*on_mpi_thread=*/true);
  }
  supervisor.join();
  spdlog::info("stopping: requests answered, shutting the ranks down");
  index->shutdown();
  metrics.log_minute();
  return 0;
}

}  // namespace shardtopk::service
