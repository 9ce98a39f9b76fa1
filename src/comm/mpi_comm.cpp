// MPI communicator: host buffers, non-blocking collectives polled against comm.timeout_s so a
// stalled or dead peer ends the job with a message instead of a hang (DESIGN.md invariant 7).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/backoff.hpp"
#include "shardtopk/communicator.hpp"

namespace shardtopk {
namespace {

// Host collectives on MPI_COMM_WORLD entered by this process (every rank enters them in the
// same order, whichever communicator object issues them) and the window that publishes the
// count. Process-wide: one collective MPI_Win_allocate per job, not one per communicator.
struct ArrivalWindow {
  MPI_Win win = MPI_WIN_NULL;
  std::int64_t* count = nullptr;
  std::int64_t seq = 0;
};
ArrivalWindow& arrivals() {
  static ArrivalWindow a;
  return a;
}

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, static_cast<size_t>(len));
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(double timeout_s) : timeout_s_(timeout_s) {
    int init = 0;
    MPI_Initialized(&init);
    SHARDTOPK_EXPECTS(init, "MPI communicator: MPI is not initialised");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_),
              "MPI_Comm_split_type");
    MPI_Comm_rank(node_, &local_rank_);
    MPI_Comm_size(node_, &local_size_);
    if (size_ > 1 && arrivals().win == MPI_WIN_NULL) {
      // Arrival counters (see arrive() and who_is_missing()): one int64 per rank, read by peers
      // with one-sided gets only after a timeout. One window per process (created by the first
      // communicator, collectively like this constructor; freed by MpiSession before
      // MPI_Finalize), passive target for its whole life.
      ArrivalWindow& a = arrivals();
      check_mpi(MPI_Win_allocate(sizeof(std::int64_t), sizeof(std::int64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &a.count,
                                 &a.win),
                "MPI_Win_allocate");
      MPI_Win_set_errhandler(a.win, MPI_ERRORS_RETURN);
      *a.count = a.seq;
      check_mpi(MPI_Win_lock_all(MPI_MODE_NOCHECK, a.win), "MPI_Win_lock_all");
    }
  }
  ~MpiCommunicator() override {
    if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
  }

  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  MemSpace space() const override { return MemSpace::kHost; }
  double timeout_s() const override { return timeout_s_; }

  void broadcast(void* buf, std::size_t bytes, int root) override {
    if (size_ == 1) return;
    arrive();
    MPI_Request req;
    check_mpi(MPI_Ibcast(buf, as_count(bytes), MPI_BYTE, root, MPI_COMM_WORLD, &req), "MPI_Ibcast");
    wait(req, "MPI_Ibcast");
  }

  void broadcast_untimed(void* buf, std::size_t bytes, int root) override {
    if (size_ == 1) return;
    arrive();  // the same collective as rank 0's broadcast: counted alike, or the counts drift
    MPI_Request req;
    check_mpi(MPI_Ibcast(buf, as_count(bytes), MPI_BYTE, root, MPI_COMM_WORLD, &req), "MPI_Ibcast");
    wait(req, "MPI_Ibcast (waiting for rank 0)", /*timed=*/false);
  }

  void allgather(const void* send, void* recv, std::size_t bytes) override {
    if (size_ == 1) {
      if (recv != send) std::memcpy(recv, send, bytes);
      return;
    }
    arrive();
    MPI_Request req;
    check_mpi(MPI_Iallgather(send, as_count(bytes), MPI_BYTE, recv, as_count(bytes), MPI_BYTE, MPI_COMM_WORLD, &req),
              "MPI_Iallgather");
    wait(req, "MPI_Iallgather");
  }

  void check(bool ok, const std::string& message) override {
    int failed = ok ? 0 : 1, any = failed;
    if (size_ > 1) {
      arrive();
      MPI_Request req;
      check_mpi(MPI_Iallreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &req), "MPI_Iallreduce");
      // A rank that failed on its own (e.g. NCCL init refused on its GPU) arrives here at once,
      // while its peers may be blocked on it in their own step (an NCCL init or collective) until
      // comm.timeout_s before they arrive too: give it twice the timeout, or it times out first,
      // blames a healthy rank and loses its own reason (and its abandoned request is matched by
      // the peers' status check).
      wait(req, "MPI_Iallreduce (status check)", /*timed=*/true, ok ? 1.0 : 2.0);
    }
    if (!any) return;
    // Somebody failed: every rank learns every failing rank's message.
    const std::string mine = ok ? std::string() : message;
    int len = static_cast<int>(mine.size());
    std::vector<int> lens(static_cast<size_t>(size_), 0), displs(static_cast<size_t>(size_), 0);
    std::string all;
    if (size_ > 1) {
      arrive();
      MPI_Request req;
      check_mpi(MPI_Iallgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD, &req), "MPI_Iallgather");
      wait(req, "MPI_Iallgather (error lengths)");
      int total = 0;
      for (int r = 0; r < size_; ++r) {
        displs[r] = total;
        total += lens[r];
      }
      all.resize(static_cast<size_t>(total));
      arrive();
      check_mpi(MPI_Iallgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR,
                                MPI_COMM_WORLD, &req),
                "MPI_Iallgatherv");
      wait(req, "MPI_Iallgatherv (error messages)");
    } else {
      lens[0] = len;
      all = mine;
    }
    // One line per distinct message, naming the ranks that sent it ("ranks 0, 1, 2: ...").
    std::vector<std::pair<std::string, std::string>> lines;  // message, ranks
    for (int r = 0; r < size_; ++r) {
      if (lens[r] == 0) continue;
      const std::string m = all.substr(static_cast<size_t>(displs[r]), static_cast<size_t>(lens[r]));
      auto it = std::find_if(lines.begin(), lines.end(), [&](const auto& l) { return l.first == m; });
      if (it == lines.end()) lines.emplace_back(m, "rank " + std::to_string(r));
      else it->second = (it->second.rfind("ranks ", 0) == 0 ? it->second : "ranks" + it->second.substr(4)) + ", " +
                        std::to_string(r);
    }
    std::string text;
    for (const auto& l : lines) text += (text.empty() ? "" : "\n") + l.second + ": " + l.first;
    if (text.empty()) text = "a rank failed without a message";
    throw RemoteError(text, !ok);
  }

  void barrier() override {
    if (size_ == 1) return;
    arrive();
    MPI_Request req;
    check_mpi(MPI_Ibarrier(MPI_COMM_WORLD, &req), "MPI_Ibarrier");
    wait(req, "MPI_Ibarrier");
  }

 private:
  static int as_count(std::size_t bytes) {
    SHARDTOPK_EXPECTS(bytes <= static_cast<std::size_t>(INT32_MAX), "MPI message of ", bytes,
                      " bytes exceeds 2 GiB; lower search.batch_max or search.k_max");
    return static_cast<int>(bytes);
  }
  void check_mpi(int code, const char* what) const {
    if (code != MPI_SUCCESS)
      throw CommError("rank " + std::to_string(rank_) + ": " + what + " failed: " + mpi_error_string(code));
  }
  // Poll until complete or timeout_s: spin briefly (latency), then back off to 50 µs sleeps.
  // Untimed waits (an idle follower) sleep longer once idle, to leave the cores to the engine.
  void wait(MPI_Request& req, const char* what, bool timed = true, double timeout_factor = 1.0) {
    const auto start = std::chrono::steady_clock::now();
    const auto limit = std::chrono::duration<double>(timeout_s_ * timeout_factor);
    int done = 0;
    for (long spins = 0;; ++spins) {
      check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), what);
      if (done) return;
      poll_backoff(spins, start, /*idle=*/!timed);
      if (timed && (spins & 63) == 0 && std::chrono::steady_clock::now() - start > limit) {
        char msg[256];
        char factor[32] = "";
        if (timeout_factor != 1.0) std::snprintf(factor, sizeof factor, "%.3g x ", timeout_factor);
        std::snprintf(msg, sizeof msg, "rank %d: %s did not complete within %.3g s (%scomm.timeout_s)", rank_, what,
                      timeout_s_ * timeout_factor, factor);
        const std::string missing = who_is_missing();
        throw CommError(std::string(msg) + (missing.empty() ? "; a peer rank is stalled or dead" : "; " + missing));
      }
    }
  }

  // Every rank counts the collectives it enters (they are entered in the same order on every
  // rank) and publishes the count in its window. No MPI call: a store the peers read only after
  // a timeout.
  void arrive() {
    ArrivalWindow& a = arrivals();
    ++a.seq;
    if (a.count) __atomic_store_n(a.count, a.seq, __ATOMIC_RELEASE);
  }

  // After a timeout in collective #seq: read every peer's count with one-sided gets, bounded in
  // time (a dead peer, or a transport that needs the target's progress, may never answer).
  // A peer whose count is below seq has not entered this collective: it is the stalled (or
  // dead) one. Returns "" when nothing could be learnt.
  std::string who_is_missing() {
    const MPI_Win win = arrivals().win;
    const std::int64_t seq = arrivals().seq;
    if (win == MPI_WIN_NULL) return "";
    std::vector<std::int64_t> seen(static_cast<size_t>(size_), -1);
    std::vector<MPI_Request> reqs(static_cast<size_t>(size_), MPI_REQUEST_NULL);
    for (int t = 0; t < size_; ++t) {
      if (t == rank_) continue;
      if (MPI_Rget(&seen[t], 1, MPI_INT64_T, t, 0, 1, MPI_INT64_T, win, &reqs[t]) != MPI_SUCCESS)
        reqs[t] = MPI_REQUEST_NULL;
    }
    std::vector<bool> answered(static_cast<size_t>(size_), false);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::min(2.0, timeout_s_));
    for (int pending = size_ - 1; pending > 0 && std::chrono::steady_clock::now() < deadline;) {
      pending = 0;
      for (int t = 0; t < size_; ++t) {
        if (t == rank_ || answered[t] || reqs[t] == MPI_REQUEST_NULL) continue;
        int done = 0;
        if (MPI_Test(&reqs[t], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
          reqs[t] = MPI_REQUEST_NULL;
          continue;
        }
        if (done) answered[t] = true;
        else ++pending;
      }
      if (pending > 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::string late, silent;
    for (int t = 0; t < size_; ++t) {
      if (t == rank_) continue;
      if (!answered[t]) {
        silent += (silent.empty() ? "" : ", ") + std::to_string(t);
      } else if (seen[t] < seq) {
        late += (late.empty() ? "rank " : "; rank ") + std::to_string(t) + " did not arrive (it has entered " +
                std::to_string(seen[t]) + " collectives, this is #" + std::to_string(seq) + ")";
      }
    }
    // Requests still pending are left to MPI_Abort, which ends the job next.
    std::string out = late;
    if (!silent.empty()) out += (out.empty() ? "" : "; ") + std::string("no answer from rank(s) ") + silent;
    if (out.empty()) return "";
    return out + ": stalled or dead";
  }

  double timeout_s_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  MPI_Comm node_ = MPI_COMM_NULL;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(double timeout_s) {
  return std::make_unique<MpiCommunicator>(timeout_s);
}

MpiSession::MpiSession(int* argc, char*** argv, MpiThreads threads) {
  int init = 0;
  MPI_Initialized(&init);
  if (!init) {
    int provided = 0;
    MPI_Init_thread(argc, argv, threads == MpiThreads::kSerialized ? MPI_THREAD_SERIALIZED : MPI_THREAD_FUNNELED,
                    &provided);
    owns_ = true;
  }
}
MpiSession::~MpiSession() {
  int fin = 0;
  MPI_Finalized(&fin);
  ArrivalWindow& a = arrivals();
  if (owns_ && !fin && a.win != MPI_WIN_NULL) {
    MPI_Win_unlock_all(a.win);
    MPI_Win_free(&a.win);
    a.count = nullptr;
  }
  if (owns_ && !fin) MPI_Finalize();
}
int MpiSession::rank() const {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int MpiSession::world_size() const {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

void abort_job(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace shardtopk
