#include "service/batcher.hpp"

#include <algorithm>
#include <thread>

#include "core/log.hpp"
#include "service/metrics.hpp"

namespace shardtopk::service {

using Clock = std::chrono::steady_clock;

namespace {

Batcher::Options checked(Batcher::Options o) {
  SHARDTOPK_EXPECTS(o.batch_max >= 1 && o.k_max >= 1 && o.dim >= 1 && o.max_filters >= 1, "batcher: batch_max ",
                    o.batch_max, ", k_max ", o.k_max, ", dim ", o.dim, ", max_filters ", o.max_filters,
                    " must be positive");
  return o;
}

}  // namespace

Batcher::Batcher(SearchBackend& backend, Options opts, Metrics* metrics)
    : backend_(backend),
      opts_(checked(std::move(opts))),
      metrics_(metrics),
      composer_(opts_.batch_max, opts_.max_filters, opts_.dim) {
  const size_t bm = static_cast<size_t>(opts_.batch_max);
  ids_.resize(bm * static_cast<size_t>(opts_.k_max));
  scores_.resize(ids_.size());
  counts_.resize(bm);
  stats_.resize(bm);
}

void Batcher::submit(std::shared_ptr<Job> job, bool was_receiving) {
  std::unique_lock<std::mutex> l(m_);
  if (was_receiving) --receiving_;
  if (failed_) {
    const int status = fail_status_;
    const std::string msg = fail_message_;
    l.unlock();
    wake();
    answer(*job, status, msg);
    return;
  }
  job->queued = Clock::now();
  q_.push_back(std::move(job));
  if (metrics_) metrics_->queue_depth.store(static_cast<int>(q_.size()));
  l.unlock();
  wake();
}

void Batcher::receiving_begin() {
  std::lock_guard<std::mutex> l(m_);
  ++receiving_;
}

void Batcher::receiving_end() {
  {
    std::lock_guard<std::mutex> l(m_);
    --receiving_;
  }
  wake();  // the oldest queued request may stop waiting for company
}

int Batcher::queued() const {
  std::lock_guard<std::mutex> l(m_);
  return static_cast<int>(q_.size());
}

int Batcher::receiving() const {
  std::lock_guard<std::mutex> l(m_);
  return receiving_;
}

void Batcher::answer_sent() {
  answer_sent_ns_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
}

void Batcher::close() {
  {
    std::lock_guard<std::mutex> l(m_);
    closed_ = true;
  }
  wake();
}

bool Batcher::dispatchable(Clock::time_point now) const {
  const Job& head = *q_.front();
  const SearchJob* s = head.search();
  if (!s || closed_ || receiving_ == 0 || now >= head.queued + opts_.window) return true;
  int rows = 0;
  for (const auto& j : q_) {
    const SearchJob* o = j->search();
    if (o && o->k == s->k && (rows += o->nq) >= opts_.batch_max) return true;
  }
  return false;
}

std::vector<std::shared_ptr<Job>> Batcher::take_batch() {
  std::vector<std::shared_ptr<Job>> batch;
  if (std::holds_alternative<CountersJob>(q_.front()->work) || std::holds_alternative<RankJob>(q_.front()->work)) {
    batch.push_back(q_.front());
    q_.pop_front();
  } else if (std::holds_alternative<WriteJob>(q_.front()->work)) {  // every queued write: one group commit
    for (auto it = q_.begin(); it != q_.end();) {
      if (std::holds_alternative<WriteJob>((*it)->work)) {
        batch.push_back(*it);
        it = q_.erase(it);
      } else {
        ++it;
      }
    }
  } else {
    // The composer takes the requests of the oldest one's k while they fit: a request whose
    // filter would be one too many waits for a later batch (the oldest request always fits: one
    // filter, max_filters >= 1).
    composer_.clear();
    for (auto it = q_.begin(); it != q_.end();) {
      const SearchJob* s = (*it)->search();
      if (s && composer_.add(s->admitted)) {
        batch.push_back(*it);
        it = q_.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (metrics_) metrics_->queue_depth.store(static_cast<int>(q_.size()));
  return batch;
}

void Batcher::wake() {
  changes_.fetch_add(1, std::memory_order_release);
  cv_.notify_all();
}

void Batcher::run() {
  // Background work waits this long when it cannot progress (a snapshot's file writer is behind).
  constexpr auto kBackgroundWait = std::chrono::milliseconds(2);
  for (;;) {
    std::vector<std::shared_ptr<Job>> batch;
    bool background = false;
    {
      std::unique_lock<std::mutex> l(m_);
      bool polled = false;
      for (;;) {
        if (!q_.empty() && dispatchable(Clock::now())) break;
        if (background_ == 1 && !closed_) {
          background = true;
          break;
        }
        if (q_.empty() && closed_) {
          // Deferred writes (a snapshot being written) are not finished: the index goes away.
          std::vector<std::shared_ptr<Job>> left;
          left.swap(deferred_);
          l.unlock();
          for (const auto& j : left) answer(*j, 503, "the service is shutting down: the snapshot was not completed");
          return;
        }
        if (!q_.empty()) {
          const auto until = q_.front()->queued + opts_.window;
          cv_.wait_until(l, background_ == 2 ? std::min(until, Clock::now() + kBackgroundWait) : until);
          if (background_ == 2) background_ = 1;
          continue;
        }
        if (background_ == 2) {
          cv_.wait_for(l, kBackgroundWait);
          background_ = 1;
          continue;
        }
        if (!polled && opts_.poll.count() > 0) {
          // Poll a while before sleeping: a request that arrives soon (a client's next one,
          // sent once this answer reached it) is taken without waking a sleeping thread.
          polled = true;
          const std::uint64_t seen = changes_.load(std::memory_order_acquire);
          l.unlock();
          // Until poll_us after now, or after the last answer sent, whichever is later (an
          // answer sent while polling extends the poll), and 2 x poll_us at most: under load
          // answers go out all the time, and a poll they kept alive would take a core from the
          // event loops while the queue is empty.
          const auto start = Clock::now();
          const auto until = [&] {
            const Clock::time_point sent{Clock::duration(answer_sent_ns_.load(std::memory_order_relaxed))};
            return std::min(start + 2 * opts_.poll, std::max(start, sent) + opts_.poll);
          };
          for (auto now = start; changes_.load(std::memory_order_acquire) == seen && now < until(); now = Clock::now())
            std::this_thread::yield();
          l.lock();
          continue;
        }
        cv_.wait(l);
      }
      if (!background) {
        batch = take_batch();
        running_ = batch;
      }
    }
    if (background) {
      run_background();
      continue;
    }
    // A batch holds one kind of job (take_batch); a RankLost leaves it in running_ for fail_all.
    std::visit(Overloaded{[&](const SearchJob&) { run_searches(batch); },
                          [&](const CountersJob&) { run_counters(batch.front()); },
                          [&](const RankJob&) { run_rank(batch.front()); },
                          [&](const WriteJob&) { run_writes(batch); }},
               batch.front()->work);
    bool closing = false;
    {
      std::lock_guard<std::mutex> l(m_);
      running_.clear();
      closing = closed_;
    }
    // Background work goes on between batches: one step after each, so that a steady search
    // load does not hold it up, and a search waits for one step at most. Closing stops it.
    if (background_ != 0 && !closing) run_background();
  }
}

void Batcher::run_background() {
  if (!opts_.background) {
    background_ = 0;
    return;
  }
  background_ = opts_.background();  // RankLost: deferred jobs stay for fail_all
  std::vector<std::shared_ptr<Job>> ready;
  {
    std::lock_guard<std::mutex> l(m_);
    for (auto it = deferred_.begin(); it != deferred_.end();) {
      if (std::get<WriteJob>((*it)->work).ready) {
        ready.push_back(*it);
        it = deferred_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const auto& j : ready) {
    if (!j->claim()) continue;
    if (j->on_done) j->on_done();
  }
}

void Batcher::answer(Job& j, int status, const std::string& error) {
  if (!j.claim()) return;
  j.status = status;
  j.error = error;
  if (j.on_done) j.on_done();
}

void Batcher::run_counters(const std::shared_ptr<Job>& job) {
  std::vector<RankCounters> c;
  try {
    c = backend_.rank_counters();
  } catch (const RankLost&) {
    throw;  // the job stays unanswered in running_: the caller answers it with fail_all
  } catch (const std::exception& e) {
    answer(*job, 500, std::string("rank counters unavailable: ") + e.what());
    return;
  }
  if (!job->claim()) return;
  std::get<CountersJob>(job->work).counters = std::move(c);
  job->status = 200;
  if (job->on_done) job->on_done();
}

void Batcher::run_rank(const std::shared_ptr<Job>& job) {
  RankJob& r = std::get<RankJob>(job->work);
  const int n = static_cast<int>(r.ids.size());
  std::vector<std::int64_t> ranks(r.ids.size());
  std::vector<float> scores(r.ids.size());
  try {
    backend_.rank(r.query.data(), r.ids.data(), n, r.filter.get(), ranks.data(), scores.data());
  } catch (const RankLost&) {
    throw;  // the job stays unanswered in running_: the caller answers it with fail_all
  } catch (const BatchRejected& e) {
    answer(*job, 400, e.what());
    return;
  } catch (const SearchFailed& e) {
    answer(*job, 500, std::string("rank failed: ") + e.what());
    return;
  } catch (const std::exception& e) {
    answer(*job, 500, std::string("internal error: ") + e.what());
    return;
  }
  const std::uint64_t seq = backend_.applied_seq();
  if (!job->claim()) return;
  r.ranks = std::move(ranks);
  r.scores = std::move(scores);
  r.applied_seq = seq;
  job->status = 200;
  if (job->on_done) job->on_done();
}

void Batcher::run_writes(const std::vector<std::shared_ptr<Job>>& jobs) {
  for (const auto& j : jobs) {
    try {
      std::get<WriteJob>(j->work).run(*j);
    } catch (const RankLost&) {
      throw;  // the group stays unanswered in running_: the caller answers it with fail_all
    } catch (const std::exception& e) {
      j->status = 500;
      j->error = std::string("internal error: ") + e.what();
    }
  }
  try {
    if (opts_.commit_writes) opts_.commit_writes();
  } catch (const RankLost&) {
    throw;
  } catch (const std::exception& e) {
    for (const auto& j : jobs)
      if (j->status == 200) {
        j->status = 500;
        j->error = std::string("the write is not known to be durable (a restart shows whether it is): ") + e.what();
      }
  }
  for (const auto& j : jobs) {
    if (std::get<WriteJob>(j->work).deferred) {  // answered by background work (kept until it is ready)
      {
        std::lock_guard<std::mutex> l(m_);
        deferred_.push_back(j);
      }
      if (j->status == 200) continue;
    }
    if (!j->claim()) continue;
    if (j->on_done) j->on_done();
  }
  if (opts_.after_writes) opts_.after_writes();  // RankLost: every job above is answered already
  background_ = 1;  // a write may have started background work (a snapshot)
}

void Batcher::run_searches(const std::vector<std::shared_ptr<Job>>& batch) {
  const int k = batch.front()->search()->k;
  const int total = composer_.size();
  const auto search_start = Clock::now();
  try {
    backend_.search(composer_.batch(), ids_.data(), scores_.data(), counts_.data(), stats_.data());
  } catch (const RankLost&) {
    throw;  // the batch stays unanswered in running_: the caller answers it with fail_all
  } catch (const SearchFailed& e) {
    spdlog::error("search of a batch of {} request(s) failed: {}", batch.size(), e.what());
    for (const auto& j : batch) answer(*j, 500, std::string("search failed: ") + e.what());
    return;
  } catch (const BatchRejected& e) {
    // Requests are admitted before they are queued, so this is a bound that writes have raised
    // since: search each request alone so that only the offending one fails.
    if (batch.size() == 1) {
      answer(*batch.front(), 400, e.what());
      return;
    }
    for (const auto& j : batch) {
      composer_.clear();
      composer_.add(j->search()->admitted);
      run_searches({j});
    }
    return;
  } catch (const std::exception& e) {
    spdlog::error("search of a batch of {} request(s) failed: {}", batch.size(), e.what());
    for (const auto& j : batch) answer(*j, 500, std::string("internal error: ") + e.what());
    return;
  }
  const auto search_end = Clock::now();
  const std::uint64_t seq = backend_.applied_seq();
  if (metrics_) metrics_->batch_done(total);
  int row = 0;
  for (const auto& j : batch) {
    SearchJob& s = *j->search();
    const size_t off = static_cast<size_t>(row) * k, n = static_cast<size_t>(s.nq) * k;
    row += s.nq;
    if (!j->claim()) continue;  // already answered by a failure
    s.ids.assign(ids_.begin() + off, ids_.begin() + off + n);
    s.scores.assign(scores_.begin() + off, scores_.begin() + off + n);
    s.counts.assign(counts_.begin() + (row - s.nq), counts_.begin() + row);
    if (s.admitted.wants_stats()) s.stats.assign(stats_.begin() + (row - s.nq), stats_.begin() + row);
    s.applied_seq = seq;
    s.batch_size = total;
    s.search_start = search_start;
    s.search_end = search_end;
    j->status = 200;
    if (j->on_done) j->on_done();
  }
}

void Batcher::fail_queued(int status, const std::string& message) {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> l(m_);
    jobs.assign(q_.begin(), q_.end());
    q_.clear();
    if (metrics_) metrics_->queue_depth.store(0);
  }
  wake();
  for (const auto& j : jobs) answer(*j, status, message);
}

void Batcher::fail_all(int status, const std::string& message) {
  std::vector<std::shared_ptr<Job>> queued, started;
  {
    std::lock_guard<std::mutex> l(m_);
    if (!failed_) {
      failed_ = true;
      fail_status_ = status;
      fail_message_ = message;
    }
    queued.assign(q_.begin(), q_.end());
    started.assign(running_.begin(), running_.end());
    started.insert(started.end(), deferred_.begin(), deferred_.end());
    q_.clear();
    if (metrics_) metrics_->queue_depth.store(0);
  }
  wake();
  // A write that had started (or waits for its log to reach the disk) may have been logged: its
  // caller must not take the failure for "not applied". One still queued was not.
  auto is_write = [](const Job& j) { return std::holds_alternative<WriteJob>(j.work); };
  for (const auto& j : queued)
    answer(*j, status, is_write(*j) ? message + "; this write was not applied" : message);
  for (const auto& j : started)
    answer(*j, status,
           is_write(*j) ? message + "; the outcome of this write is unknown: it may have been logged, and is then "
                                    "present after a restart (read it back before sending it again)"
                        : message);
}

}  // namespace shardtopk::service
