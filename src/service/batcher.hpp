#pragma once
// Micro-batching: search requests (Jobs), admitted by the HTTP front end, are grouped by k into
// batches of at most batch_max queries and max_filters distinct filters (requests with different
// filters share a batch; one that would bring a filter too many waits for the next batch) and
// searched on the thread that owns the index (rank 0's main thread); a BatchComposer merges them
// into the batch the index takes as given. Every job is answered exactly once, by whichever comes
// first: its batch's result, or a failure that answers everything outstanding (a rank lost, a
// drain timeout).
//
// When a batch is dispatched (docs/SERVING.md, "Micro-batching"): at once when the queued
// queries of the oldest request's k fill a batch, or when no other search request is being
// received (so a lone request never waits); otherwise when the oldest request has waited
// service.batch_window_us for the ones still arriving. Requests queued while a search runs go
// together into the next batch.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "service/search_backend.hpp"

namespace shardtopk::service {

class Metrics;
struct Job;

/// A search request: its queries and k, and once searched, its answer.
struct SearchJob {
  int nq = 0;                  ///< queries
  int k = 0;
  std::vector<float> queries;  ///< [nq, dim], float32
  /// The request's filter, for every one of its queries (nullptr: none, or one passing every row).
  std::shared_ptr<const FilterProgram> filter;
  /// `queries` and `filter` as admitted (SearchBackend::admit), pointing at them.
  SearchBatch admitted;

  // ---- the answer (status 200)
  std::vector<std::int64_t> ids;     ///< [nq, k] best first; past counts[q], padding (kPadId)
  std::vector<float> scores;         ///< [nq, k]
  std::vector<std::int32_t> counts;  ///< [nq] real results per query (k unless a filter passes fewer rows)
  std::vector<QueryStats> stats;     ///< [nq] when the request has bounds (SearchBatch::wants_stats); else empty
  std::uint64_t applied_seq = 0;     ///< the last write the answer reflects
  bool count_only = false;           ///< the request asked for the totals alone
  int batch_size = 0;                ///< queries in the batch it rode in
  /// When the index thread started and ended its batch's search (stage timings).
  std::chrono::steady_clock::time_point search_start, search_end;
};

/// A request for every rank's counters (/metrics): a collective, so it runs on the index thread.
struct CountersJob {
  std::vector<RankCounters> counters;  ///< [ranks], the answer (status 200)
};

/// A request for the exact ranks of ids (/v1/rank): two collective searches, so it runs alone
/// on the index thread (SearchBackend::rank).
struct RankJob {
  std::vector<float> query;                    ///< [dim], float32
  std::vector<std::int64_t> ids;               ///< [n], as the request gave them
  std::shared_ptr<const FilterProgram> filter;  ///< nullptr: every row

  // ---- the answer (status 200)
  std::vector<std::int64_t> ranks;  ///< [n] 1-based: 1 + the rows ahead of each id in the order
  std::vector<float> scores;        ///< [n] each id's score (reported units)
  std::uint64_t applied_seq = 0;    ///< the last write the answer reflects
};

/// A write (upsert, delete, snapshot). Writes queued together run one after the other, then
/// Options::commit_writes once, then all are answered.
struct WriteJob {
  /// Runs on the index thread; sets the job's status and `body` (or its error).
  std::function<void(Job&)> run;
  std::string body;  ///< the answer (JSON)
  std::int64_t rows = -1;  ///< rows upserted, deleted or in the snapshot (status 200), for the audit log
  std::int64_t seq = -1;   ///< the write's log sequence number (status 200)
  /// Set by `run` when the answer comes later, from background work (Options::background,
  /// between batches), which sets `ready` once the status and body are written.
  bool deferred = false;
  bool ready = false;
};

/// One unit of work for the index thread: one of the four kinds of request, with what every
/// kind has (its answer's status or error, and who is told once it is answered). The front end
/// fills the request and `on_done`; whoever claims the job writes the answer, then calls
/// `on_done` (on that thread).
struct Job {
  std::variant<SearchJob, CountersJob, RankJob, WriteJob> work;
  std::chrono::steady_clock::time_point queued;

  int status = 0;  ///< HTTP status: 200, or 400 / 500 / 503 ... with `error`
  std::string error;

  /// Called once, after the answer is written, from the thread that answered (the index thread,
  /// or the thread that failed the job). Must not block.
  std::function<void()> on_done;

  /// True for the first caller only: that caller writes the answer and calls on_done.
  bool claim() { return !claimed_.exchange(true); }

  SearchJob* search() { return std::get_if<SearchJob>(&work); }
  const SearchJob* search() const { return std::get_if<SearchJob>(&work); }

 private:
  std::atomic<bool> claimed_{false};
};

/// One callable per kind of job, for std::visit over Job::work.
template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

class Batcher {
 public:
  struct Options {
    int batch_max = 64;            ///< queries per search (search.batch_max)
    int k_max = 1024;              ///< largest k (sizes the answer buffers)
    std::int64_t dim = 0;
    std::chrono::microseconds window{300};  ///< service.batch_window_us
    int max_filters = 64;          ///< distinct filters per search (BackendInfo::max_filters)
    /// After a group of write jobs: makes them durable and visible (WriteBackend::commit).
    std::function<void()> commit_writes;
    /// After a group of write jobs has been answered (WriteBackend::after_commit).
    std::function<void()> after_writes;
    /// Index thread, between batches and while no batch is due: one step of background work
    /// (a snapshot's next block). Returns 0 when none remains, 1 after progress, 2 when work
    /// remains but cannot progress yet (the thread then waits a little, or for a job).
    /// @throws RankLost when a rank is gone.
    std::function<int()> background;
    /// How long the index thread polls for work before it sleeps, once the queue is empty and
    /// since the last search answer went out (answer_sent), at most twice this in all;
    /// service.poll_us, 0: it sleeps at once.
    std::chrono::microseconds poll{0};
  };

  /// `metrics` may be null. The backend must outlive the batcher.
  Batcher(SearchBackend& backend, Options opts, Metrics* metrics = nullptr);

  /// Queue a job (any thread). `was_receiving`: the job's request had been announced with
  /// receiving_begin(); it no longer counts as being received. After fail_all() the job is
  /// answered at once with that failure.
  void submit(std::shared_ptr<Job> job, bool was_receiving);

  /// A search request is being received (headers in, body still arriving): batches wait for it
  /// (up to the window). Every receiving_begin() is matched by receiving_end() or by a submit()
  /// with was_receiving = true.
  void receiving_begin();
  void receiving_end();

  /// Index thread: run jobs until close() and an empty queue. @throws RankLost from the index;
  /// the failed batch and the queue are left unanswered for the caller's fail_all (which may
  /// first learn a better reason, e.g. which rank is gone); the job must end.
  void run();

  /// run() returns once the queue is empty (jobs submitted later are still run first).
  void close();

  /// Answer every queued job that no search has taken yet with `status` and `message`.
  void fail_queued(int status, const std::string& message);

  /// Answer every job not answered yet, including those in the running batch (its result is
  /// then dropped), and every later submission, with `status` and `message`.
  void fail_all(int status, const std::string& message);

  int queued() const;
  int receiving() const;

  /// A search's answer has been sent (any thread, lock-free): its client's next request may
  /// follow, so an idle index thread polls for Options::poll from now rather than sleeping
  /// (up to twice Options::poll after its queue emptied). A
  /// closed-loop client sends its next request about one round trip after the batch ended; the
  /// poll counted from the batch's end alone runs out first when the answer's way out (resume,
  /// write) and the client's turnaround together exceed it.
  void answer_sent();

 private:
  bool dispatchable(std::chrono::steady_clock::time_point now) const;  // m_ held, q_ not empty
  std::vector<std::shared_ptr<Job>> take_batch();                       // m_ held
  /// Searches `batch`, whose requests composer_ holds.
  void run_searches(const std::vector<std::shared_ptr<Job>>& batch);
  void run_counters(const std::shared_ptr<Job>& job);
  void run_rank(const std::shared_ptr<Job>& job);
  void run_writes(const std::vector<std::shared_ptr<Job>>& jobs);
  static void answer(Job& j, int status, const std::string& error);
  /// One step of background work; answers the deferred jobs it made ready.
  void run_background();
  void wake();  // after a change of what run() waits for (m_ released or held)

  SearchBackend& backend_;
  const Options opts_;
  Metrics* metrics_;

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::atomic<std::uint64_t> changes_{0};  // counts wake(): what a polling run() watches
  std::atomic<std::int64_t> answer_sent_ns_{0};  // answer_sent(): the steady clock's ticks since its epoch
  std::deque<std::shared_ptr<Job>> q_;
  std::vector<std::shared_ptr<Job>> running_;  // the batch being searched
  std::vector<std::shared_ptr<Job>> deferred_;  // writes answered by background work
  int receiving_ = 0;
  bool closed_ = false;
  bool failed_ = false;
  int fail_status_ = 0;
  std::string fail_message_;

  // index thread only
  BatchComposer composer_;          // the batch being taken (take_batch) and searched (run_searches)
  std::vector<std::int64_t> ids_;   // [batch_max, k_max]
  std::vector<float> scores_;
  std::vector<std::int32_t> counts_;                // [batch_max]
  std::vector<QueryStats> stats_;                   // [batch_max]
  int background_ = 0;  // the last Options::background answer (1: try again now)
};

}  // namespace shardtopk::service
