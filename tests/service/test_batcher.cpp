// The micro-batcher over a fake index: when batches are dispatched (a lone request at once,
// company waited for only while requests are being received, full batches at once, requests
// queued during a search together), each request's own rows back, failures answered to exactly
// the requests they concern, and every job answered exactly once whatever fails.
//
// Bounds in this file ("answered within 20 s") are liveness limits only: the windows under test
// are 60 s long, so a wrong dispatch rule shows as a missing answer, not as a slow one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "service/batcher.hpp"
#include "service/metrics.hpp"

namespace shardtopk::service {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr std::int64_t kDim = 2;
constexpr auto kLong = 60s;         // a window no test waits out
constexpr std::chrono::seconds kLiveness{20};  // "never answered" after this

// What the fake index admits requests against: k up to 8, requests of up to 8 queries.
const Admission& admission() {
  static const Admission a([] {
    SearchLimits l;
    l.dim = kDim;
    l.k_max = 8;
    l.k_rows = 1000;
    l.batch_max = 8;
    l.max_filters = 64;
    return l;
  }());
  return a;
}

// ids[q][j] = 1000 * round(query[q][0]) + j, scores[q][j] = query[q][1] - j: each answer shows
// which query it belongs to. Optionally holds every search until released, and fails on demand.
class FakeBackend final : public SearchBackend {
 public:
  BackendInfo info() const override {
    BackendInfo i;
    i.rows = 1000;
    i.dim = kDim;
    i.k_max = 8;
    i.batch_max = 4;
    i.ranks = 2;
    i.metric = "inner_product";
    return i;
  }
  SearchBatch admit(const float* queries, int nq, long long k, const FilterProgram* filter,
                    const QueryBounds* = nullptr, bool = false) const override {
    const std::vector<const FilterProgram*> each(static_cast<std::size_t>(nq), filter);
    return admission().admit(queries, nq, k, each.data());
  }

  void search(const SearchBatch& b, std::int64_t* ids, float* scores, std::int32_t* counts, QueryStats*) override {
    const int batch = b.size(), k = b.k();
    const float* q = b.queries();
    {
      std::unique_lock<std::mutex> l(m_);
      calls_.push_back({batch, k});
      std::vector<const FilterProgram*> f;
      for (int i = 0; i < batch && b.filter_count() > 0; ++i)
        f.push_back(b.query_program()[i] < 0 ? nullptr : b.filter_programs()[b.query_program()[i]]);
      filters_.push_back(f);
      cv_.notify_all();
      cv_.wait(l, [&] { return !hold_; });
    }
    for (int i = 0; i < batch; ++i) {
      if (reject_marker_ && q[i * kDim] == -1.0f) throw BatchRejected("query value -1 refused");
    }
    if (fail_next_.exchange(false)) throw SearchFailed("rank 1: local search failed");
    if (lose_next_.exchange(false)) throw RankLost("rank 1: MPI_Iallgather did not complete within 2 s");
    for (int i = 0; i < batch; ++i) {
      for (int j = 0; j < k; ++j) {
        ids[i * k + j] = 1000 * static_cast<std::int64_t>(std::lround(q[i * kDim])) + j;
        scores[i * k + j] = q[i * kDim + 1] - static_cast<float>(j);
      }
      counts[i] = k;
    }
  }
  std::vector<RankCounters> rank_counters() override { return {{3, 0.5}, {4, 0.25}}; }
  // ranks[i] = ids[i] + 1, scores[i] = query[0]; a negative id is refused (as an unknown one).
  void rank(const float* query, const std::int64_t* ids, int n, const FilterProgram*, std::int64_t* ranks,
            float* scores) override {
    for (int i = 0; i < n; ++i) {
      if (ids[i] < 0) throw BatchRejected("ids: unknown id " + std::to_string(ids[i]));
      ranks[i] = ids[i] + 1;
      scores[i] = query[0];
    }
  }

  void hold(bool h) {
    std::lock_guard<std::mutex> l(m_);
    hold_ = h;
    cv_.notify_all();
  }
  // Waits until `n` searches have started.
  bool wait_calls(size_t n) {
    std::unique_lock<std::mutex> l(m_);
    return cv_.wait_for(l, kLiveness, [&] { return calls_.size() >= n; });
  }
  std::vector<std::pair<int, int>> calls() {
    std::lock_guard<std::mutex> l(m_);
    return calls_;
  }
  // Each search's per-query filters (empty: the search had none).
  std::vector<std::vector<const FilterProgram*>> filters() {
    std::lock_guard<std::mutex> l(m_);
    return filters_;
  }

  std::atomic<bool> fail_next_{false}, lose_next_{false};
  bool reject_marker_ = false;

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool hold_ = false;
  std::vector<std::pair<int, int>> calls_;  // (batch, k)
  std::vector<std::vector<const FilterProgram*>> filters_;
};

struct Tracked {
  std::shared_ptr<Job> job;
  std::shared_ptr<std::promise<void>> done;
  std::shared_future<void> answered_;
  std::shared_ptr<std::atomic<int>> answers;
  template <typename D = std::chrono::seconds>
  bool answered(D within = kLiveness) const {
    return answered_.wait_for(within) == std::future_status::ready;
  }
};

SearchJob& search_of(const Tracked& t) { return *t.job->search(); }

// A search job of `nq` queries whose first values are `tag`, tag + 1, ...
Tracked make_job(int tag, int nq = 1, int k = 3) {
  Tracked t;
  t.job = std::make_shared<Job>();
  SearchJob& s = t.job->work.emplace<SearchJob>();
  s.nq = nq;
  s.k = k;
  for (int q = 0; q < nq; ++q) {
    s.queries.push_back(static_cast<float>(tag + q));
    s.queries.push_back(0.5f * static_cast<float>(tag + q));
  }
  s.admitted = admission().admit(s.queries.data(), nq, k);
  t.done = std::make_shared<std::promise<void>>();
  t.answered_ = t.done->get_future().share();
  t.answers = std::make_shared<std::atomic<int>>(0);
  auto done = t.done;
  auto answers = t.answers;
  t.job->on_done = [done, answers] {
    if (answers->fetch_add(1) == 0) done->set_value();
  };
  return t;
}

// The request's filter, for each of its queries, admitted with it (as the front end does).
void set_filter(Tracked& t, std::shared_ptr<const FilterProgram> f) {
  SearchJob& s = search_of(t);
  s.filter = std::move(f);
  s.admitted = FakeBackend().admit(s.queries.data(), s.nq, s.k, s.filter.get());
}

// A batcher running on its own thread (the index thread in the service).
struct Running {
  explicit Running(FakeBackend& be, std::chrono::microseconds window = kLong, int batch_max = 4, int max_filters = 64)
      : batcher(be, Batcher::Options{batch_max, 8, kDim, window, max_filters}, &metrics) {
    thread = std::thread([this] {
      try {
        batcher.run();
      } catch (const RankLost& e) {
        lost = e.what();
      }
    });
  }
  ~Running() {
    batcher.close();
    thread.join();
  }
  Metrics metrics;
  Batcher batcher;
  std::thread thread;
  std::string lost;
};

void expect_own_rows(const Job& job, int tag) {
  ASSERT_EQ(job.status, 200) << job.error;
  const SearchJob& j = *job.search();
  ASSERT_EQ(j.ids.size(), static_cast<size_t>(j.nq * j.k));
  for (int q = 0; q < j.nq; ++q)
    for (int x = 0; x < j.k; ++x) {
      EXPECT_EQ(j.ids[q * j.k + x], 1000 * (tag + q) + x) << "query " << q;
      EXPECT_EQ(j.scores[q * j.k + x], 0.5f * static_cast<float>(tag + q) - static_cast<float>(x));
    }
}

TEST(Batcher, ALoneRequestIsDispatchedAtOnce) {
  FakeBackend be;
  Running r(be);  // a 60 s window: only "nothing else is being received" can dispatch it
  Tracked a = make_job(7);
  r.batcher.submit(a.job, false);
  ASSERT_TRUE(a.answered()) << "a lone request waited for the batch window";
  expect_own_rows(*a.job, 7);
  EXPECT_EQ(search_of(a).batch_size, 1);
  // announced, then submitted: still alone, still at once
  r.batcher.receiving_begin();
  Tracked b = make_job(8);
  r.batcher.submit(b.job, /*was_receiving=*/true);
  ASSERT_TRUE(b.answered());
  EXPECT_EQ(r.batcher.receiving(), 0);
}

TEST(Batcher, WaitsForRequestsBeingReceivedThenSearchesThemTogether) {
  FakeBackend be;
  Running r(be);
  r.batcher.receiving_begin();  // request A's body is arriving
  r.batcher.receiving_begin();  // and B's
  Tracked a = make_job(1);
  r.batcher.submit(a.job, true);
  EXPECT_FALSE(a.answered(200ms)) << "dispatched while B was still being received";
  EXPECT_TRUE(be.calls().empty());
  Tracked b = make_job(2);
  r.batcher.submit(b.job, true);
  ASSERT_TRUE(a.answered());
  ASSERT_TRUE(b.answered());
  EXPECT_EQ(search_of(a).batch_size, 2);
  expect_own_rows(*a.job, 1);
  expect_own_rows(*b.job, 2);
  ASSERT_EQ(be.calls().size(), 1u);
}

TEST(Batcher, AReceivingRequestThatIsRefusedReleasesTheWait) {
  FakeBackend be;
  Running r(be);
  r.batcher.receiving_begin();
  r.batcher.receiving_begin();
  Tracked a = make_job(1);
  r.batcher.submit(a.job, true);
  EXPECT_FALSE(a.answered(100ms));
  r.batcher.receiving_end();  // the other request was refused (a 400), never queued
  ASSERT_TRUE(a.answered());
  EXPECT_EQ(search_of(a).batch_size, 1);
}

TEST(Batcher, TheWindowBoundsTheWaitForRequestsBeingReceived) {
  FakeBackend be;
  Running r(be, 20ms);
  r.batcher.receiving_begin();  // never completes (a client trickling its body)
  Tracked a = make_job(3);
  r.batcher.submit(a.job, false);
  ASSERT_TRUE(a.answered()) << "waited past the window";
  expect_own_rows(*a.job, 3);
}

TEST(Batcher, AFullBatchIsDispatchedAtOnceAndKeepsEachRequestsRows) {
  FakeBackend be;
  Running r(be, kLong, 4);
  r.batcher.receiving_begin();  // someone else is arriving: only a full batch dispatches
  std::vector<Tracked> t = {make_job(10, 1), make_job(20, 2), make_job(30, 1)};
  for (auto& x : t) r.batcher.submit(x.job, false);
  for (auto& x : t) {
    ASSERT_TRUE(x.answered()) << "a full batch waited";
    EXPECT_EQ(search_of(x).batch_size, 4);
  }
  expect_own_rows(*t[0].job, 10);
  expect_own_rows(*t[1].job, 20);
  expect_own_rows(*t[2].job, 30);
  r.batcher.receiving_end();
}

TEST(Batcher, RequestsQueuedDuringASearchRideTogetherByK) {
  FakeBackend be;
  Running r(be, kLong, 4);
  be.hold(true);
  Tracked first = make_job(1);
  r.batcher.submit(first.job, false);
  ASSERT_TRUE(be.wait_calls(1));
  // queued while the first search runs: k = 3 (three of them, one of 2 rows) and k = 5
  std::vector<Tracked> k3 = {make_job(2), make_job(3, 2), make_job(5)};
  Tracked k5 = make_job(6, 1, 5);
  Tracked k3_last = make_job(7);  // does not fit the k = 3 batch (4 rows): the next one
  for (auto& x : k3) r.batcher.submit(x.job, false);
  r.batcher.submit(k5.job, false);
  r.batcher.submit(k3_last.job, false);
  be.hold(false);
  for (auto* x : {&first, &k3[0], &k3[1], &k3[2], &k5, &k3_last}) ASSERT_TRUE(x->answered());
  const auto calls = be.calls();
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[1], std::make_pair(4, 3));  // the oldest k first, as many rows as fit
  EXPECT_EQ(calls[2], std::make_pair(1, 5));
  EXPECT_EQ(calls[3], std::make_pair(1, 3));
  expect_own_rows(*k3[1].job, 3);
  expect_own_rows(*k5.job, 6);
  expect_own_rows(*k3_last.job, 7);
}

// Requests with different filters share a batch, each query with its request's filter; equal
// filters (equal programs, not only the same object) count once against max_filters, and a
// request whose filter would be one too many waits for the next batch instead of failing.
TEST(Batcher, FiltersRideTogetherUpToMaxFiltersAndTheRestWaits) {
  FakeBackend be;
  Running r(be, kLong, 8, /*max_filters=*/2);
  const AttributeSchema none;
  const auto f1 = std::make_shared<const FilterProgram>(parse_filter(R"({"ids_in": [1, 9]})", none));
  const auto f1_again = std::make_shared<const FilterProgram>(parse_filter(R"({"ids_in": [9, 1, 1]})", none));
  const auto f2 = std::make_shared<const FilterProgram>(parse_filter(R"({"ids_in": [2]})", none));
  const auto f3 = std::make_shared<const FilterProgram>(parse_filter(R"({"ids_not_in": [3]})", none));
  be.hold(true);
  Tracked first = make_job(1);
  r.batcher.submit(first.job, false);
  ASSERT_TRUE(be.wait_calls(1));
  Tracked a = make_job(10, 2), b = make_job(20), c = make_job(30), d = make_job(40), e = make_job(50), f = make_job(60);
  set_filter(a, f1);
  set_filter(c, f2);
  set_filter(d, f1_again);
  set_filter(e, f3);  // a third distinct filter: waits
  for (auto* x : {&a, &b, &c, &d, &e, &f}) r.batcher.submit(x->job, false);
  be.hold(false);
  for (auto* x : {&first, &a, &b, &c, &d, &e, &f}) ASSERT_TRUE(x->answered());
  const auto calls = be.calls();
  const auto filters = be.filters();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[1], std::make_pair(6, 3));
  EXPECT_EQ(calls[2], std::make_pair(1, 3));
  EXPECT_TRUE(filters[0].empty()) << "a batch without filters passes none";
  // f1_again is f1's program: the batch holds it once, and d's query uses f1's copy
  const std::vector<const FilterProgram*> want = {f1.get(), f1.get(), nullptr, f2.get(), f1.get(), nullptr};
  EXPECT_EQ(filters[1], want);
  EXPECT_EQ(filters[2], std::vector<const FilterProgram*>{f3.get()});
  for (auto* x : {&a, &b, &c, &d, &e, &f}) {
    EXPECT_EQ(search_of(*x).counts, std::vector<std::int32_t>(static_cast<size_t>(search_of(*x).nq), 3));
  }
  expect_own_rows(*a.job, 10);
  expect_own_rows(*e.job, 50);
  expect_own_rows(*f.job, 60);
}

TEST(Batcher, ARejectedBatchIsSearchedRequestByRequest) {
  FakeBackend be;
  be.reject_marker_ = true;
  Running r(be, kLong, 4);
  be.hold(true);
  Tracked first = make_job(1);
  r.batcher.submit(first.job, false);
  ASSERT_TRUE(be.wait_calls(1));
  Tracked good1 = make_job(2), bad = make_job(-1), good2 = make_job(4);
  for (auto* x : {&good1, &bad, &good2}) r.batcher.submit(x->job, false);
  be.hold(false);
  for (auto* x : {&good1, &bad, &good2}) ASSERT_TRUE(x->answered());
  expect_own_rows(*good1.job, 2);
  expect_own_rows(*good2.job, 4);
  EXPECT_EQ(bad.job->status, 400);
  EXPECT_THAT(bad.job->error, HasSubstr("query value -1 refused"));
}

TEST(Batcher, AFailedSearchAnswers500AndTheNextOneIsServed) {
  FakeBackend be;
  Running r(be);
  be.fail_next_ = true;
  Tracked a = make_job(1);
  r.batcher.submit(a.job, false);
  ASSERT_TRUE(a.answered());
  EXPECT_EQ(a.job->status, 500);
  EXPECT_THAT(a.job->error, HasSubstr("rank 1"));
  Tracked b = make_job(2);
  r.batcher.submit(b.job, false);
  ASSERT_TRUE(b.answered());
  expect_own_rows(*b.job, 2);
}

TEST(Batcher, ALostRankAnswersEveryJob503AndEndsTheLoop) {
  FakeBackend be;
  auto r = std::make_unique<Running>(be, kLong, 1);
  be.hold(true);
  Tracked a = make_job(1);
  r->batcher.submit(a.job, false);
  ASSERT_TRUE(be.wait_calls(1));
  Tracked queued = make_job(2);
  r->batcher.submit(queued.job, false);
  be.lose_next_ = true;
  be.hold(false);
  r->thread.join();
  EXPECT_THAT(r->lost, HasSubstr("did not complete"));
  EXPECT_FALSE(a.answered(std::chrono::milliseconds(0))) << "the owner answers, with the reason it knows";
  r->batcher.fail_all(503, std::string("a rank is gone: ") + r->lost);
  ASSERT_TRUE(a.answered());
  ASSERT_TRUE(queued.answered());
  for (auto* x : {&a, &queued}) {
    EXPECT_EQ(x->job->status, 503);
    EXPECT_THAT(x->job->error, HasSubstr("a rank is gone: rank 1"));
    EXPECT_EQ(x->answers->load(), 1);
  }
  Tracked late = make_job(3);
  r->batcher.submit(late.job, false);
  ASSERT_TRUE(late.answered(1s)) << "a job submitted after the loss must be answered at once";
  EXPECT_EQ(late.job->status, 503);
  r->thread = std::thread([] {});  // joined by ~Running
}

// A write that had started when a rank was lost may have been logged: its 503 says the outcome is
// unknown. A write still queued was not applied, and its 503 says so; a search's 503 says neither.
TEST(Batcher, ALostRankTellsAStartedWriteItsOutcomeIsUnknownAndAQueuedOneItWasNotApplied) {
  FakeBackend be;
  auto r = std::make_unique<Running>(be, kLong, 1);
  std::atomic<bool> started{false}, lose{false};
  Tracked w1 = make_job(0), w2 = make_job(0);
  w1.job->work = WriteJob{[&](Job&) {
                            started = true;
                            while (!lose) std::this_thread::sleep_for(1ms);
                            throw RankLost("rank 1 is gone: its liveness connection to rank 0 was reset");
                          },
                          {}};
  w2.job->work = WriteJob{[](Job& j) { j.status = 200; }, {}};
  r->batcher.submit(w1.job, false);
  while (!started) std::this_thread::sleep_for(1ms);
  r->batcher.submit(w2.job, false);
  Tracked s = make_job(5);
  r->batcher.submit(s.job, false);
  lose = true;
  r->thread.join();
  r->batcher.fail_all(503, std::string("a rank is gone: ") + r->lost);
  for (auto* x : {&w1, &w2, &s}) {
    ASSERT_TRUE(x->answered());
    EXPECT_EQ(x->job->status, 503);
    EXPECT_THAT(x->job->error, HasSubstr("a rank is gone: rank 1 is gone"));
    EXPECT_EQ(x->answers->load(), 1);
  }
  EXPECT_THAT(w1.job->error, HasSubstr("the outcome of this write is unknown: it may have been logged"));
  EXPECT_THAT(w2.job->error, HasSubstr("this write was not applied"));
  EXPECT_THAT(s.job->error, Not(HasSubstr("write")));
  r->thread = std::thread([] {});  // joined by ~Running
}

TEST(Batcher, FailAllAnswersTheRunningBatchAtOnceAndOnlyOnce) {
  FakeBackend be;
  Running r(be);
  be.hold(true);
  Tracked a = make_job(1), b = make_job(2);
  r.batcher.submit(a.job, false);
  ASSERT_TRUE(be.wait_calls(1));
  r.batcher.submit(b.job, false);
  r.batcher.fail_all(503, "rank 1 stalled: no heartbeat for 1500 ms");
  ASSERT_TRUE(a.answered()) << "the running batch must not wait for its search";
  ASSERT_TRUE(b.answered());
  be.hold(false);  // the search returns; its result must not answer a second time
  Tracked c = make_job(3);
  r.batcher.submit(c.job, false);
  ASSERT_TRUE(c.answered());
  std::this_thread::sleep_for(100ms);
  for (auto* x : {&a, &b, &c}) {
    EXPECT_EQ(x->job->status, 503);
    EXPECT_THAT(x->job->error, HasSubstr("rank 1 stalled"));
    EXPECT_EQ(x->answers->load(), 1);
  }
}

TEST(Batcher, FailQueuedLeavesTheRunningBatchItsResult) {
  FakeBackend be;
  Running r(be, kLong, 1);
  be.hold(true);
  Tracked a = make_job(1), b = make_job(2);
  r.batcher.submit(a.job, false);
  ASSERT_TRUE(be.wait_calls(1));
  r.batcher.submit(b.job, false);
  r.batcher.fail_queued(503, "shutting down");
  ASSERT_TRUE(b.answered());
  EXPECT_EQ(b.job->status, 503);
  be.hold(false);
  ASSERT_TRUE(a.answered());
  expect_own_rows(*a.job, 1);
}

TEST(Batcher, CloseRunsWhatIsQueuedFirst) {
  FakeBackend be;
  auto r = std::make_unique<Running>(be, kLong, 1);
  be.hold(true);
  std::vector<Tracked> t = {make_job(1), make_job(2), make_job(3)};
  for (auto& x : t) r->batcher.submit(x.job, false);
  ASSERT_TRUE(be.wait_calls(1));
  r->batcher.close();
  be.hold(false);
  r.reset();  // joins run()
  for (size_t i = 0; i < t.size(); ++i) {
    ASSERT_TRUE(t[i].answered(1s));
    expect_own_rows(*t[i].job, static_cast<int>(i) + 1);
  }
}

// service.poll_us: the index thread polls for work before it sleeps. A job queued while it polls
// is taken (a 60 s poll: seeing the job, not the poll's end, must take it), also after an answer
// sent has extended the poll, and so is one queued after the poll ended and the thread slept;
// close() ends a polling thread.
TEST(Batcher, APollingIndexThreadTakesNewJobsAndStops) {
  FakeBackend be;
  Metrics metrics;
  Batcher::Options o{4, 8, kDim, kLong, 64};
  o.poll = kLong;
  auto b = std::make_unique<Batcher>(be, o, &metrics);
  std::thread t([&] { b->run(); });
  Tracked a = make_job(1);
  b->submit(a.job, false);
  ASSERT_TRUE(a.answered());  // polling after this one
  std::this_thread::sleep_for(50ms);
  b->answer_sent();  // the front end sent a's answer: the poll goes on from now
  Tracked c = make_job(2);
  b->submit(c.job, false);
  ASSERT_TRUE(c.answered()) << "a job queued while the index thread polled waited for the poll to end";
  expect_own_rows(*c.job, 2);
  b->close();
  t.join();  // a polling run() returns on close()
  o.poll = 1ms;  // a short poll, then sleep
  b = std::make_unique<Batcher>(be, o, &metrics);
  std::thread t2([&] { b->run(); });
  b->answer_sent();
  std::this_thread::sleep_for(50ms);
  Tracked d = make_job(3);
  b->submit(d.job, false);
  ASSERT_TRUE(d.answered());
  expect_own_rows(*d.job, 3);
  b->close();
  t2.join();
}

// A write answered by background work (a snapshot: WriteJob::deferred): searches queued while the
// background cannot progress (2) or while it steps (1) are answered, the write only once a step
// makes it ready; a deferred write still pending at close() gets 503.
TEST(Batcher, ADeferredWriteIsAnsweredByBackgroundStepsWhileSearchesGoOn) {
  FakeBackend be;
  Metrics metrics;
  Batcher::Options o{4, 8, kDim, 1ms, 64};
  std::atomic<bool> release{false};
  std::atomic<int> steps{0};
  Job* pending = nullptr;  // index thread only
  o.background = [&]() -> int {
    if (!pending) return 0;
    if (!release.load()) return 2;  // the file writer is behind
    if (++steps < 5) return 1;
    WriteJob& w = std::get<WriteJob>(pending->work);
    w.body = "done";
    w.ready = true;
    pending = nullptr;
    return 0;
  };
  auto b = std::make_unique<Batcher>(be, o, &metrics);
  std::thread t([&] { b->run(); });
  auto make_write = [&](bool defer) {
    Tracked w = make_job(0);
    w.job->work = WriteJob{[&pending, defer](Job& j) {
                             j.status = 200;
                             if (!defer) return;
                             std::get<WriteJob>(j.work).deferred = true;
                             pending = &j;
                           },
                           {}};
    return w;
  };
  Tracked w = make_write(true);
  b->submit(w.job, false);
  for (int i = 0; i < 3; ++i) {
    Tracked s = make_job(10 + i);
    b->submit(s.job, false);
    ASSERT_TRUE(s.answered()) << "a search waited for the deferred write";
    expect_own_rows(*s.job, 10 + i);
  }
  EXPECT_FALSE(w.answered(50ms)) << "answered before the background made it ready";
  release = true;
  ASSERT_TRUE(w.answered());
  EXPECT_EQ(w.job->status, 200);
  EXPECT_EQ(std::get<WriteJob>(w.job->work).body, "done");
  EXPECT_EQ(steps.load(), 5);
  EXPECT_EQ(w.answers->load(), 1);
  // Pending at close: 503.
  release = false;
  Tracked w2 = make_write(true);
  b->submit(w2.job, false);
  std::this_thread::sleep_for(20ms);
  b->close();
  t.join();
  ASSERT_TRUE(w2.answered(1s));
  EXPECT_EQ(w2.job->status, 503);
  EXPECT_THAT(w2.job->error, HasSubstr("the snapshot was not completed"));
}

TEST(Batcher, CountersJobsRunOnTheIndexThread) {
  FakeBackend be;
  Running r(be);
  Tracked c = make_job(0);
  c.job->work = CountersJob{};
  r.batcher.submit(c.job, false);
  ASSERT_TRUE(c.answered());
  ASSERT_EQ(c.job->status, 200);
  const auto& counters = std::get<CountersJob>(c.job->work).counters;
  ASSERT_EQ(counters.size(), 2u);
  EXPECT_EQ(counters[1].searches, 4);
  EXPECT_TRUE(be.calls().empty());
  EXPECT_EQ(r.metrics.queue_depth.load(), 0);
}

// A rank job runs alone on the index thread (no search call), queued searches are still served,
// and an id the backend refuses answers 400 with its message.
TEST(Batcher, RankJobsRunAloneOnTheIndexThread) {
  FakeBackend be;
  Running r(be);
  auto rank_job = [](std::vector<std::int64_t> ids) {
    Tracked t = make_job(0);
    RankJob j;
    j.query = {2.5f, 0.0f};
    j.ids = std::move(ids);
    t.job->work = std::move(j);
    return t;
  };
  Tracked a = rank_job({4, 0});
  Tracked s = make_job(3);
  Tracked bad = rank_job({1, -7});
  r.batcher.submit(a.job, false);
  r.batcher.submit(s.job, false);
  r.batcher.submit(bad.job, false);
  ASSERT_TRUE(a.answered() && s.answered() && bad.answered());
  ASSERT_EQ(a.job->status, 200) << a.job->error;
  const RankJob& ra = std::get<RankJob>(a.job->work);
  EXPECT_EQ(ra.ranks, (std::vector<std::int64_t>{5, 1}));
  EXPECT_EQ(ra.scores, (std::vector<float>{2.5f, 2.5f}));
  expect_own_rows(*s.job, 3);
  EXPECT_EQ(bad.job->status, 400);
  EXPECT_EQ(bad.job->error, "ids: unknown id -7");
  EXPECT_EQ(be.calls().size(), 1u) << "only the search job searched";
}

}  // namespace
}  // namespace shardtopk::service
