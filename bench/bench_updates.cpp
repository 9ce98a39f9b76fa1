// bench_updates: online updates of a sharded index (docs/STORAGE.md "Updates") on a generated
// corpus, phase by phase, through the product's own calls: the index thread submits writes
// (ShardedIndex::submit_upsert / submit_remove) and makes each group durable and visible with
// one apply_writes(), as serve's batcher does, between its searches.
//
//   (a) upserts: W closed-loop clients send requests of R new rows (R = 1, 64, 1024); rows/s per
//       rank and acknowledged latency (p50/p99 from a request's arrival at the index thread's
//       queue to its acknowledgement). Each R runs --seconds or --upsert-rows rows, whichever
//       ends first.
//   (b) deletes: requests of --delete-ids ids (every --delete-every-th corpus row: 10 % by
//       default), one at a time; ids/s.
//   (c) batch-1 search p50 with those tombstones against the same index before the deletes and
//       against the compacted index (snapshot, then reload of the same live rows).
//   (d) batch-1 search p50/p99 while one client upserts continuously (replacing rows of (a)
//       with their own vectors: the live set does not change) against the same index idle.
//   (e) restart: load_index over the snapshot plus a log of --log-records single-row records
//       (a comma list: one restart per count), timed from the call until the first search has
//       answered (and over the snapshot alone).
//   (f) the snapshot before (e), written while batch-1 searches go on (one snapshot step before
//       each search, counted in its latency): p50/p99 against the idle p99 of (c).
//
// Rows added by (a) hold the generated rows of a pool (id N + j: generated row N + j mod
// --pool), so an answer can be checked by regenerating rows: #wrong counts sampled answers
// (after the writes, during (d), after the restart) that disagree with float64 scores over the
// live rows (pipeline.hpp check_samples, count mode on the host). One JSON line per phase (-J),
// then a table; progress on stderr. Exit status 1 when anything was wrong.
//
//   mpirun -np 1 build/bench/bench_updates -N 1M -d 768 -t float16 --dir /scratch/bench-updates
#include <CLI/CLI.hpp>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include "core/log.hpp"
#include "core/stats.hpp"
#include "harness.hpp"
#include "pipeline.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/generator.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/ingest.hpp"
#include "shardtopk/ordering.hpp"

namespace shardtopk::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Flags {
  std::string rows = "1M";
  std::int64_t dim = 768;
  int k = 100;
  std::string dtype = "float16", metric = "inner_product";
#ifdef SHARDTOPK_WITH_CUDA
  std::string engine = "cuda";
#else
  std::string engine = "cpu";
#endif
  std::string dir;
  std::string capacity = "0";
  std::string request_rows = "1,64,1024";
  int writers = 8;
  double seconds = 3;
  std::string upsert_rows = "200k";
  std::string delete_ids = "10k";
  int delete_every = 10;
  int concurrent_rows = 64;
  std::string log_records = "100k";
  std::string pool = "64k";
  int iters = 200, warmup = 20, check = 1, check_queries = 8;
  std::uint64_t seed = 1;
  std::string json_path, git, tag;
  std::vector<std::string> sets;
  bool keep = false;
  int corrupt = 0;
};

// ------------------------------------------------------------------ writes through the index thread

/// One upsert request of a client: ids and their rows (the pool rows of ids past the corpus).
struct Request {
  std::vector<std::int64_t> ids;
  std::vector<float> vectors;
  Clock::time_point queued;
  bool done = false;
  std::string error;
};

/// Closed-loop clients hand requests to the index thread, which submits every queued one,
/// makes the group durable and visible with one apply_writes(), and acknowledges them.
class WriteQueue {
 public:
  void push(Request* r) {
    std::lock_guard<std::mutex> l(m_);
    r->queued = Clock::now();
    q_.push_back(r);
    cv_.notify_all();
  }
  void wait_done(Request* r) {
    std::unique_lock<std::mutex> l(m_);
    cv_.wait(l, [&] { return r->done; });
  }
  /// Index thread: the queued requests (waiting up to `wait` for one).
  std::vector<Request*> take(std::chrono::microseconds wait) {
    std::unique_lock<std::mutex> l(m_);
    if (q_.empty()) cv_.wait_for(l, wait, [&] { return !q_.empty(); });
    std::vector<Request*> out(q_.begin(), q_.end());
    q_.clear();
    return out;
  }
  void acknowledge(const std::vector<Request*>& rs) {
    std::lock_guard<std::mutex> l(m_);
    for (Request* r : rs) r->done = true;
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Request*> q_;
};

/// Index thread: submits and applies one group; returns the requests' errors (first one).
std::string commit_group(ShardedIndex& index, const std::vector<Request*>& group) {
  std::string first_error;
  std::vector<Request*> submitted;
  for (Request* r : group) {
    try {
      UpsertRows u;
      u.rows = static_cast<std::int64_t>(r->ids.size());
      u.ids = r->ids.data();
      u.vectors = r->vectors.data();
      index.submit_upsert(u);
      submitted.push_back(r);
    } catch (const std::exception& e) {
      r->error = e.what();
      if (first_error.empty()) first_error = e.what();
    }
  }
  if (!submitted.empty()) index.apply_writes();
  return first_error;
}

/// The vectors of ids [first, first + n) (consecutive) from the corpus spec's pool rows.
void pool_rows(const CorpusSpec& c, const std::vector<float>& pool, std::int64_t pool_rows_n, std::int64_t first_id,
               std::int64_t n, std::vector<float>* out) {
  out->resize(static_cast<std::size_t>(n * c.dim));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t at = (first_id + i - c.rows) % pool_rows_n;
    std::copy_n(pool.data() + at * c.dim, c.dim, out->data() + i * c.dim);
  }
}

struct ClientStats {
  std::vector<double> lat_ms;
  std::int64_t rows = 0;
  std::string error;
};

// ------------------------------------------------------------------ the run

struct Phase {
  json rec;
  std::string name, config, rate_unit;
  double rate = NAN, p50 = NAN, p99 = NAN, ratio = NAN;
  long long wrong = -1;  // -1: not checked in this phase
};

struct Run {
  Run(const Flags& f, const Config& cfg, const CorpusSpec& spec, int rank, int world)
      : f_(f), cfg_(cfg), spec_(spec), rank_(rank), world_(world) {
    const int nq = std::max(64, f.check_queries);
    queries_.resize(static_cast<std::size_t>(nq) * spec.dim);
    generate_rows(f.seed + 1, 0, nq, spec.dim, queries_.data(), 0);
    ids_.resize(static_cast<std::size_t>(f.k));
    scores_.resize(ids_.size());
  }

  void progress(const std::string& s) const {
    if (rank_ == 0) std::cerr << "bench_updates: " << s << std::endl;
  }

  /// Batch-1 searches (rank 0): warm-up, then `iters` timed ones; latencies in ms. Samples the
  /// first check_queries answers under `entry` (>= 0).
  std::vector<double> searches(ShardedIndex& index, int iters, int warmup, int entry,
                               const std::function<void()>& between = nullptr) {
    std::vector<double> lat;
    const int nq = static_cast<int>(queries_.size() / spec_.dim);
    for (int it = -warmup; it < iters; ++it) {
      if (between) between();
      const int q = ((it % nq) + nq) % nq;
      const auto t0 = Clock::now();
      index.search(queries_.data() + static_cast<std::size_t>(q) * spec_.dim, 1, f_.k, ids_.data(), scores_.data());
      const auto t1 = Clock::now();
      if (it >= 0) lat.push_back(ms_between(t0, t1));
      if (entry >= 0 && it >= 0 && it < f_.check_queries) sample(entry, q);
    }
    return lat;
  }

  void sample(int entry, int q) {
    Sample s;
    s.entry = entry;
    s.query = q;
    s.k = f_.k;
    s.ids = ids_;
    s.scores = scores_;
    if (f_.corrupt == 1 && samples_.empty()) s.ids.back() = 3 % f_.delete_every;  // a deleted row
    samples_.push_back(std::move(s));
  }

  Phase record(const std::string& name, const std::string& config) {
    Phase p;
    p.name = name;
    p.config = config;
    p.rec["bench"] = "bench_updates";
    p.rec["phase"] = name;
    p.rec["config"] = config;
    return p;
  }

  // (a) W clients, requests of R new rows each, for --seconds or `budget` rows.
  Phase upserts(ShardedIndex& index, int r, std::int64_t budget, const std::vector<float>& pool) {
    Phase p = record("upsert", "R=" + std::to_string(r) + " W=" + std::to_string(f_.writers));
    WriteQueue queue;
    std::atomic<std::int64_t> issued{0};
    std::atomic<bool> stop{false};
    std::atomic<int> active{f_.writers};
    std::vector<ClientStats> stats(static_cast<std::size_t>(f_.writers));
    std::vector<std::thread> clients;
    const auto t0 = Clock::now();
    for (int w = 0; w < f_.writers; ++w)
      clients.emplace_back([&, w] {
        ClientStats& st = stats[static_cast<std::size_t>(w)];
        Request req;
        while (!stop.load()) {
          if (issued.fetch_add(r) + r > budget) break;
          const std::int64_t first = next_id_.fetch_add(r);
          req.ids.resize(static_cast<std::size_t>(r));
          for (int j = 0; j < r; ++j) req.ids[static_cast<std::size_t>(j)] = first + j;
          pool_rows(spec_, pool, spec_.added_pool, first, r, &req.vectors);
          req.done = false;
          queue.push(&req);
          queue.wait_done(&req);
          if (!req.error.empty()) {
            st.error = req.error;
            break;
          }
          st.lat_ms.push_back(ms_between(req.queued, Clock::now()));
          st.rows += r;
        }
        --active;
      });
    std::string error;
    while (active.load() > 0) {
      if (Clock::now() - t0 > std::chrono::duration<double>(f_.seconds)) stop = true;
      const std::vector<Request*> group = queue.take(std::chrono::microseconds(1000));
      if (group.empty()) continue;
      const std::string e = commit_group(index, group);
      if (error.empty()) error = e;
      queue.acknowledge(group);
    }
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    for (auto& t : clients) t.join();
    for (const auto& st : stats)
      if (error.empty() && !st.error.empty()) error = st.error;
    SHARDTOPK_EXPECTS(error.empty(), "upserts of ", r, " rows failed: ", error);
    std::vector<double> lat;
    std::int64_t rows = 0;
    for (const auto& st : stats) {
      lat.insert(lat.end(), st.lat_ms.begin(), st.lat_ms.end());
      rows += st.rows;
    }
    const UpdateStats us = index.update_stats();
    p.rate = static_cast<double>(rows) / wall / world_;
    p.rate_unit = "rows/s/rank";
    p.p50 = percentile(lat, 50);
    p.p99 = percentile(lat, 99);
    p.rec.update({{"rows_per_request", r}, {"writers", f_.writers}, {"requests", lat.size()}, {"rows", rows},
                  {"seconds", wall}, {"rows_per_s_per_rank", p.rate}, {"rows_per_s", rows / wall},
                  {"ack_p50_ms", p.p50}, {"ack_p99_ms", p.p99},
                  {"ack_max_ms", lat.empty() ? 0.0 : *std::max_element(lat.begin(), lat.end())},
                  {"log_bytes", us.log_bytes}, {"live_rows", us.live_rows}});
    progress(p.config + ": " + fmt_num(p.rate, 0) + " rows/s per rank, ack p99 " + fmt_num(p.p99, 2) + " ms");
    return p;
  }

  // (b) deletes of every delete_every-th corpus row, in requests of `per` ids.
  Phase deletes(ShardedIndex& index, std::int64_t per) {
    Phase p = record("delete", "ids/req=" + std::to_string(per));
    std::vector<double> lat;
    std::vector<std::int64_t> ids;
    std::int64_t deleted = 0;
    const auto t0 = Clock::now();
    for (std::int64_t id = 3 % f_.delete_every; id < spec_.rows;) {
      ids.clear();
      for (; id < spec_.rows && static_cast<std::int64_t>(ids.size()) < per; id += f_.delete_every) ids.push_back(id);
      const auto a = Clock::now();
      const WriteResult wr = index.submit_remove(ids.data(), static_cast<std::int64_t>(ids.size()));
      index.apply_writes();
      lat.push_back(ms_between(a, Clock::now()));
      SHARDTOPK_EXPECTS(wr.rows == static_cast<std::int64_t>(ids.size()), "a delete of ", ids.size(),
                        " live ids deleted ", wr.rows);
      deleted += wr.rows;
    }
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    const UpdateStats us = index.update_stats();
    p.rate = static_cast<double>(deleted) / wall;
    p.rate_unit = "ids/s";
    p.p50 = percentile(lat, 50);
    p.p99 = percentile(lat, 99);
    p.rec.update({{"ids_per_request", per}, {"requests", lat.size()}, {"ids", deleted}, {"seconds", wall},
                  {"ids_per_s", p.rate}, {"ack_p50_ms", p.p50}, {"ack_p99_ms", p.p99},
                  {"tombstones", us.tombstones}, {"live_rows", us.live_rows}});
    progress("deletes: " + std::to_string(deleted) + " ids, " + fmt_num(p.rate, 0) + " ids/s");
    return p;
  }

  // (d) searches while one client replaces rows of (a) (their own vectors) continuously.
  Phase searches_during_writes(ShardedIndex& index, const std::vector<float>& pool, std::int64_t added,
                               const std::vector<double>& idle) {
    const int r = static_cast<int>(std::min<std::int64_t>(f_.concurrent_rows, added));
    Phase p = record("search_during_writes", "B=1 R=" + std::to_string(r));
    WriteQueue queue;
    std::atomic<bool> stop{false}, finished{false};
    std::int64_t rows = 0;
    std::string error, client_error;
    std::thread client([&] {
      Request req;
      for (std::int64_t c = 0; !stop.load(); ++c) {
        const std::int64_t first = spec_.rows + (c * r) % (added - r + 1);
        req.ids.resize(static_cast<std::size_t>(r));
        for (int j = 0; j < r; ++j) req.ids[static_cast<std::size_t>(j)] = first + j;
        pool_rows(spec_, pool, spec_.added_pool, first, r, &req.vectors);
        req.done = false;
        queue.push(&req);
        queue.wait_done(&req);
        if (!req.error.empty()) {
          client_error = req.error;
          break;
        }
        rows += r;
      }
      finished = true;
    });
    long groups = 0;
    auto drain = [&](std::chrono::microseconds wait) {
      const std::vector<Request*> group = queue.take(wait);
      if (group.empty()) return;
      ++groups;
      const std::string e = commit_group(index, group);
      if (error.empty()) error = e;
      queue.acknowledge(group);
    };
    const auto t0 = Clock::now();
    const std::vector<double> lat =
        searches(index, f_.iters, f_.warmup, /*entry=*/1, [&] { drain(std::chrono::microseconds(0)); });
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    stop = true;
    while (!finished.load()) drain(std::chrono::microseconds(1000));  // the client's last request
    client.join();
    if (error.empty()) error = client_error;
    SHARDTOPK_EXPECTS(error.empty(), "upserts during searches failed: ", error);
    p.p50 = percentile(lat, 50);
    p.p99 = percentile(lat, 99);
    p.ratio = p.p99 / percentile(idle, 99);
    p.rate = static_cast<double>(rows) / wall;
    p.rate_unit = "rows/s";
    p.rec.update({{"batch", 1}, {"iters", f_.iters}, {"p50_ms", p.p50}, {"p99_ms", p.p99},
                  {"idle_p50_ms", percentile(idle, 50)}, {"idle_p99_ms", percentile(idle, 99)},
                  {"p50_ratio", p.p50 / percentile(idle, 50)}, {"p99_ratio", p.ratio},
                  {"rows_per_request", r}, {"upserted_rows", rows}, {"write_groups", groups},
                  {"upserted_rows_per_s", p.rate}});
    progress("searches during writes: p99 " + fmt_num(p.p99, 3) + " ms (idle " + fmt_num(percentile(idle, 99), 3) +
             " ms), " + fmt_num(p.rate, 0) + " rows/s upserted meanwhile");
    return p;
  }

  // (f) a snapshot written while batch-1 searches go on, as serve's index thread interleaves
  // them: one snapshot step (a block of rows to rank 0) before each search, and the search's
  // latency counts that step (what a request arriving during the step waits), until the
  // snapshot is committed.
  Phase searches_during_snapshot(ShardedIndex& index, const std::vector<double>& idle) {
    progress("snapshot while searching");
    const auto t0 = Clock::now();
    std::optional<SnapshotResult> done = index.start_snapshot();
    std::vector<double> lat, step_ms, search_ms;
    const int nq = static_cast<int>(queries_.size() / spec_.dim);
    for (int it = 0; !done; ++it) {
      const auto ts = Clock::now();
      const SnapshotProgress p = index.snapshot_step();
      const auto tq = Clock::now();
      step_ms.push_back(ms_between(ts, tq));
      SHARDTOPK_EXPECTS(p.failed.empty(), "the snapshot failed: ", p.failed);
      if (p.done) {
        done = p.done;
        break;
      }
      const int q = it % nq;
      index.search(queries_.data() + static_cast<std::size_t>(q) * spec_.dim, 1, f_.k, ids_.data(), scores_.data());
      lat.push_back(ms_between(ts, Clock::now()));
      search_ms.push_back(ms_between(tq, Clock::now()));
    }
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    Phase p = record("snapshot", "rows=" + std::to_string(done->rows) + " B=1 searches");
    p.rate = static_cast<double>(done->rows) / wall;
    p.rate_unit = "rows/s";
    p.p50 = lat.empty() ? NAN : percentile(lat, 50);
    p.p99 = lat.empty() ? NAN : percentile(lat, 99);
    p.ratio = p.p99 / percentile(idle, 99);
    p.rec.update({{"seconds", wall}, {"rows", done->rows}, {"seq", done->seq}, {"path", done->path},
                  {"searches_during", lat.size()}, {"p50_ms", p.p50}, {"p99_ms", p.p99},
                  {"step_p50_ms", percentile(step_ms, 50)}, {"step_p99_ms", percentile(step_ms, 99)},
                  {"search_alone_p99_ms", lat.empty() ? NAN : percentile(search_ms, 99)},
                  {"idle_p50_ms", percentile(idle, 50)}, {"idle_p99_ms", percentile(idle, 99)}, {"p99_ratio", p.ratio}});
    progress("snapshot of " + std::to_string(done->rows) + " rows in " + fmt_num(wall, 2) + " s; " +
             std::to_string(lat.size()) + " searches meanwhile, p99 " + fmt_num(p.p99, 3) + " ms (idle " +
             fmt_num(percentile(idle, 99), 3) + " ms; a step's p50 " + fmt_num(percentile(step_ms, 50), 3) +
             " ms, p99 " + fmt_num(percentile(step_ms, 99), 3) + " ms; a search's alone p99 " +
             fmt_num(lat.empty() ? NAN : percentile(search_ms, 99), 3) + " ms)");
    return p;
  }

  // (e) records for the restart: `m` single-row upserts replacing rows of (a), submitted in
  // groups of 1000 per apply_writes().
  double write_log(ShardedIndex& index, const std::vector<float>& pool, std::int64_t added, std::int64_t m,
                   std::int64_t first) {
    std::vector<float> v;
    const auto t0 = Clock::now();
    for (std::int64_t j = 0; j < m;) {
      for (int g = 0; g < 1000 && j < m; ++g, ++j) {
        std::int64_t id = spec_.rows + (first + j) % added;
        pool_rows(spec_, pool, spec_.added_pool, id, 1, &v);
        UpsertRows u;
        u.rows = 1;
        u.ids = &id;
        u.vectors = v.data();
        index.submit_upsert(u);
      }
      index.apply_writes();
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  const Flags& f_;
  Config cfg_;
  CorpusSpec spec_;
  int rank_, world_;
  std::vector<float> queries_;
  std::vector<std::int64_t> ids_;
  std::vector<float> scores_;
  std::vector<Sample> samples_;
  std::atomic<std::int64_t> next_id_{0};
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int run(MpiSession& mpi, int argc, char** argv) {
  const int rank = mpi.rank(), world = mpi.world_size();
  Flags f;
  CLI::App app{"shardtopk updates benchmark: upserts, deletes, searches with tombstones and during writes, restart",
               "bench_updates"};
  app.add_option("-N,--rows", f.rows, "corpus rows (1M, 200k)")->capture_default_str();
  app.add_option("-d,--dim", f.dim, "dimension")->capture_default_str();
  app.add_option("-k,--k", f.k, "K of the searches")->capture_default_str();
  app.add_option("-t,--dtype", f.dtype, "storage: float32, float16, bfloat16")->capture_default_str();
  app.add_option("-m,--metric", f.metric, "inner_product | cosine | l2")->capture_default_str();
  app.add_option("--engine", f.engine, "cuda | cpu")->capture_default_str();
  app.add_option("--dir", f.dir, "storage directory parent (a fresh bench_updates/ inside, removed after)")
      ->required();
  app.add_option("--capacity-rows", f.capacity,
                 "storage.capacity_rows per rank (0: the shard plus every row the run adds, with room to spare)")
      ->capture_default_str();
  app.add_option("-R,--request-rows", f.request_rows, "rows per upsert request, comma list (phase a)")
      ->capture_default_str();
  app.add_option("-W,--writers", f.writers, "closed-loop upsert clients (phase a)")->capture_default_str();
  app.add_option("--seconds", f.seconds, "seconds per upsert configuration at most (phase a)")->capture_default_str();
  app.add_option("--upsert-rows", f.upsert_rows, "rows per upsert configuration at most (phase a)")
      ->capture_default_str();
  app.add_option("--delete-ids", f.delete_ids, "ids per delete request (phase b)")->capture_default_str();
  app.add_option("--delete-every", f.delete_every, "delete every n-th corpus row (10: 10 %)")->capture_default_str();
  app.add_option("--concurrent-rows", f.concurrent_rows, "rows per upsert request during searches (phase d)")
      ->capture_default_str();
  app.add_option("--log-records", f.log_records,
                 "log records replayed at each restart, comma list, increasing (phase e: one restart per count)")
      ->capture_default_str();
  app.add_option("--pool", f.pool, "distinct generated rows behind the added ids")->capture_default_str();
  app.add_option("-n,--iters", f.iters, "timed searches per search phase")->capture_default_str();
  app.add_option("-w,--warmup", f.warmup, "warm-up searches per search phase")->capture_default_str();
  app.add_option("-c,--check", f.check, "check sampled answers (0|1); a wrong answer exits non-zero")
      ->capture_default_str();
  app.add_option("--check-queries", f.check_queries, "answers checked per sampled phase")->capture_default_str();
  app.add_option("--seed", f.seed, "corpus seed (queries: seed + 1)")->capture_default_str();
  app.add_option("-J,--json", f.json_path, "append one JSON record per phase to FILE ('-': stdout)");
  app.add_option("--set", f.sets, "config override key=value (engine.threads, storage.group_commit_window_us, ...)");
  app.add_option("--git", f.git, "the commit to record");
  app.add_option("--tag", f.tag, "free text copied into every record");
  app.add_flag("--keep", f.keep, "keep the storage directory");
  app.add_option("--corrupt", f.corrupt, "tests only: 1 puts a deleted row into a sampled answer (the check must fail)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
  }
  init_logging(rank, world);
  if (!log_level_from_environment()) spdlog::set_level(spdlog::level::warn);

  std::vector<int> request_rows;
  for (const auto& s : split_commas(f.request_rows)) request_rows.push_back(static_cast<int>(parse_count(s)));
  const std::int64_t upsert_budget = parse_count(f.upsert_rows), delete_per = parse_count(f.delete_ids);
  const std::int64_t pool_n = parse_count(f.pool);
  std::vector<std::int64_t> log_records;  // cumulative: the log's records at each restart
  for (const auto& c : split_commas(f.log_records)) {
    log_records.push_back(parse_count(c));
    SHARDTOPK_EXPECTS(log_records.back() >= 1 && (log_records.size() == 1 || log_records.back() > log_records[log_records.size() - 2]),
                      "--log-records ", f.log_records, ": counts >= 1, increasing");
  }
  SHARDTOPK_EXPECTS(!log_records.empty(), "--log-records is empty");
  SHARDTOPK_EXPECTS(f.writers >= 1 && f.delete_every >= 2 && f.concurrent_rows >= 1 && pool_n >= 1 &&
                        delete_per >= 1 && f.iters >= 1 && f.check_queries >= 0,
                    "--writers, --concurrent-rows, --pool, --delete-ids, -n must be >= 1, --delete-every >= 2");
  for (int r : request_rows) SHARDTOPK_EXPECTS(r >= 1 && r <= upsert_budget, "-R ", r, " outside [1, --upsert-rows]");

  Config cfg;
  apply_override(cfg, "engine.backend=" + f.engine);
  for (const auto& s : f.sets) apply_override(cfg, s);
  cfg.search.k_max = std::max(cfg.search.k_max, f.k);
  cfg.search.metric = parse_metric(f.metric);
  cfg.engine.dtype = parse_dtype(f.dtype);
  const std::string dir = f.dir + "/bench_updates";
  cfg.storage.dir = dir;

  CorpusSpec spec;
  spec.seed = f.seed;
  spec.rows = parse_count(f.rows);
  spec.dim = f.dim;
  spec.metric = *cfg.search.metric;
  spec.dtype = cfg.engine.dtype;
  spec.added_pool = pool_n;
  const std::int64_t shard_max = (spec.rows + world - 1) / world;
  const std::int64_t added_max = upsert_budget * static_cast<std::int64_t>(request_rows.size());
  cfg.storage.capacity_rows = parse_count(f.capacity);
  if (cfg.storage.capacity_rows == 0)  // the placement rule fills the emptiest rank: ±1 row per rank
    cfg.storage.capacity_rows = shard_max + (added_max + world - 1) / world + 1024;

  if (rank == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  Run run(f, cfg, spec, rank, world);
  run.next_id_ = spec.rows;
  // Pool rows, as the corpus generates ids [N, N + pool) (rank 0 sends them).
  std::vector<float> pool;
  if (rank == 0) {
    pool.resize(static_cast<std::size_t>(pool_n * spec.dim));
    generate_rows(spec.seed, spec.rows, pool_n, spec.dim, pool.data(), 0);
  }

  std::vector<Phase> phases;
  run.progress("building " + std::to_string(spec.rows) + " x " + std::to_string(spec.dim) + " " + f.dtype + " (" +
               f.engine + " engine, " + std::to_string(world) + " rank(s)), capacity " +
               std::to_string(cfg.storage.capacity_rows) + " rows per rank");
  const auto t_build = Clock::now();
  auto bidx = std::make_unique<BenchIndex>(spec, cfg, Options{});
  const double build_s = seconds_since(t_build);
  const std::string engine_name = bidx->engine_name(), device = bidx->device_name();
  ShardedIndex& index = bidx->index();

  // ---- (a)..(d) and the snapshot: rank 0 drives, the others follow.
  std::int64_t added = 0;
  std::string snapshot_path;
  std::vector<double> idle_tomb;
  if (rank == 0) {
    run.progress("idle searches");
    const std::vector<double> fresh = run.searches(index, f.iters, f.warmup, -1);
    for (int r : request_rows) phases.push_back(run.upserts(index, r, upsert_budget, pool));
    added = run.next_id_.load() - spec.rows;
    SHARDTOPK_EXPECTS(added >= 1, "the upserts added no rows");
    run.progress("searches before deletes");
    const std::vector<double> before = run.searches(index, f.iters, f.warmup, -1);
    phases.push_back(run.deletes(index, delete_per));
    run.progress("searches with tombstones");
    idle_tomb = run.searches(index, f.iters, f.warmup, /*entry=*/0);
    Phase c = run.record("search_tombstones", "B=1 " + std::to_string(100 / f.delete_every) + "% deleted");
    c.p50 = percentile(idle_tomb, 50);
    c.p99 = percentile(idle_tomb, 99);
    c.ratio = c.p50 / percentile(before, 50);
    c.rec.update({{"batch", 1}, {"iters", f.iters}, {"p50_ms", c.p50}, {"p99_ms", c.p99},
                  {"before_deletes_p50_ms", percentile(before, 50)}, {"fresh_p50_ms", percentile(fresh, 50)},
                  {"p50_ratio_to_before_deletes", c.ratio}, {"tombstones", index.update_stats().tombstones}});
    phases.push_back(c);
    phases.push_back(run.searches_during_writes(index, pool, added, idle_tomb));
    Phase s = run.searches_during_snapshot(index, idle_tomb);
    phases.push_back(s);
    snapshot_path = s.rec["path"].get<std::string>();
    index.shutdown();
  } else {
    index.follow();
  }
  MPI_Bcast(&added, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  bidx.reset();
  std::vector<char> path_buf(4096, 0);
  if (rank == 0) std::copy_n(snapshot_path.begin(), std::min<std::size_t>(snapshot_path.size(), 4095), path_buf.begin());
  MPI_Bcast(path_buf.data(), 4096, MPI_CHAR, 0, MPI_COMM_WORLD);
  cfg.corpus.path = path_buf.data();  // load_index reads the manifest's snapshot

  // ---- (e) restart over the snapshot alone (the compacted index of (c)), then with a log of
  // each --log-records count (records appended before each restart).
  auto append_log = [&](ShardedIndex& idx, std::int64_t m, std::int64_t first) {
    run.progress("writing " + std::to_string(m) + " log records");
    const double ws = run.write_log(idx, pool, added, m, first);
    const UpdateStats us = idx.update_stats();
    Phase w = run.record("log_write", "records=" + std::to_string(m) + " rows/record=1");
    w.rate = static_cast<double>(m) / ws;
    w.rate_unit = "records/s";
    w.rec.update({{"seconds", ws}, {"records", m}, {"log_bytes", us.log_bytes}, {"records_per_s", w.rate}});
    phases.push_back(w);
  };
  auto restart = [&](const std::string& what, const std::function<void(ShardedIndex&, double)>& then) {
    MPI_Barrier(MPI_COMM_WORLD);
    run.progress("restart: " + what);
    const auto t0 = Clock::now();
    std::unique_ptr<ShardedIndex> idx = load_index(cfg, false);
    if (rank == 0) {
      run.searches(*idx, 1, 0, -1);
      then(*idx, seconds_since(t0));
      idx->shutdown();
    } else {
      idx->follow();
    }
  };
  restart("snapshot", [&](ShardedIndex& idx, double s) {
    Phase r = run.record("restart", "snapshot, 0 records");
    r.p50 = s * 1e3;
    const std::vector<double> lat = run.searches(idx, f.iters, f.warmup, -1);
    Phase c = run.record("search_compacted", "B=1 after snapshot + reload");
    c.p50 = percentile(lat, 50);
    c.p99 = percentile(lat, 99);
    c.ratio = percentile(idle_tomb, 50) / c.p50;
    c.rec.update({{"batch", 1}, {"iters", f.iters}, {"p50_ms", c.p50}, {"p99_ms", c.p99},
                  {"tombstones_p50_ms", percentile(idle_tomb, 50)}, {"tombstones_p50_ratio_to_compacted", c.ratio}});
    r.rec.update({{"seconds_to_first_answer", s}, {"log_records", 0}, {"live_rows", idx.update_stats().live_rows}});
    phases.push_back(r);
    phases.push_back(c);
    append_log(idx, log_records.front(), 0);
  });
  for (std::size_t l = 0; l < log_records.size(); ++l) {
    restart("snapshot + log", [&](ShardedIndex& idx, double s) {
      const UpdateStats us = idx.update_stats();
      Phase r = run.record("restart", "snapshot + " + std::to_string(us.log_records) + " records");
      r.p50 = s * 1e3;
      r.rate = static_cast<double>(us.log_records) / s;
      r.rate_unit = "records/s";
      r.rec.update({{"seconds_to_first_answer", s}, {"log_records", us.log_records}, {"log_bytes", us.log_bytes},
                    {"live_rows", us.live_rows}});
      phases.push_back(r);
      if (l + 1 == log_records.size()) {
        run.searches(idx, f.check_queries, 0, /*entry=*/2);
        return;
      }
      append_log(idx, log_records[l + 1] - log_records[l], log_records[l]);
    });
  }

  // ---- the check: every sample against float64 scores over the live rows.
  CheckInfo info;
  info.mode = "none";
  std::vector<CheckResult> checks(3);
  if (f.check) {
    run.progress("checking " + std::to_string(run.samples_.size()) + " answers");
    CorpusSpec live = spec;
    live.added_rows = added;
    const std::int64_t every = f.delete_every, first = 3 % every, n = spec.rows;
    live.deleted = [every, first, n](std::int64_t id) { return id < n && id % every == first; };
    std::unique_ptr<Communicator> host = make_mpi_communicator(cfg.comm.timeout_s);
    checks = check_samples(live, *host, shard_rows(spec.rows, world, rank), run.queries_, run.samples_, 3,
                           CheckMode::kCount, resolve_threads(cfg, host->local_size()), 0, &info);
  }
  long long total_wrong = 0;
  if (rank == 0) {
    const char* entry_phase[3] = {"search_tombstones", "search_during_writes", "restart"};
    for (int e = 0; e < 3; ++e) {
      total_wrong += checks[static_cast<std::size_t>(e)].wrong;
      for (Phase& p : phases)
        if (p.name == entry_phase[e] && (e != 2 || p.rec["log_records"].get<std::int64_t>() == log_records.back())) {
          p.wrong = f.check ? checks[static_cast<std::size_t>(e)].wrong : -1;
          p.rec["checked_queries"] = checks[static_cast<std::size_t>(e)].queries;
          p.rec["wrong"] = checks[static_cast<std::size_t>(e)].wrong;
          p.rec["near_tie_swaps"] = checks[static_cast<std::size_t>(e)].near_ties;
          if (!checks[static_cast<std::size_t>(e)].first_problem.empty())
            p.rec["first_problem"] = checks[static_cast<std::size_t>(e)].first_problem;
        }
    }
    const Table table({{"phase", "", 21},
                       {"config", "", 28},
                       {"rate", "", 11},
                       {"unit", "", 12},
                       {"p50|time", "(ms)", 9},
                       {"p99", "(ms)", 9},
                       {"ratio", "", 6},
                       {"#wrong", "", 6}});
    std::cout << "# bench_updates: " << world << " rank(s), engine " << engine_name << " (" << device << "), "
              << spec.rows << " x " << spec.dim << " " << f.dtype << " " << f.metric << ", K " << f.k << ", build "
              << fmt_num(build_s, 1) << " s, storage " << dir << ", git " << git_commit(f.git) << "\n"
              << "# upserts: " << f.writers << " clients, <= " << f.seconds << " s or " << upsert_budget
              << " rows per R; rows added " << added << "; search phases: " << f.iters << " batch-1 searches, k "
              << f.k << "\n"
              << "# ratio: tombstones p50 / before deletes p50; during writes p99 / idle p99; tombstones p50 / "
                 "compacted p50; snapshot p99 (searches during it) / idle p99; restart p50 = seconds to the first answer "
                 "(ms)\n"
              << table.header();
    for (Phase& p : phases) {
      p.rec.update({{"ranks", world}, {"rows_total", spec.rows}, {"dim", spec.dim}, {"dtype", f.dtype},
                    {"metric", f.metric}, {"k", f.k}, {"engine", engine_name}, {"device", device},
                    {"check_mode", info.mode}, {"git", git_commit(f.git)}, {"host", host_name()}, {"time", utc_now()}});
      if (!f.tag.empty()) p.rec["tag"] = f.tag;
      write_json_line(f.json_path, p.rec);
      std::cout << table.line({p.name, p.config, fmt_num(p.rate, 0), p.rate_unit, fmt_num(p.p50, 3),
                               fmt_num(p.p99, 3), fmt_num(p.ratio, 3), p.wrong < 0 ? "-" : fmt_int(p.wrong)});
      if (p.wrong > 0) std::cout << "# WRONG: " << p.name << ": " << p.rec["first_problem"].get<std::string>() << "\n";
    }
    if (f.check) std::cout << "# checked " << run.samples_.size() << " answers (" << info.mode << ")\n";
  }
  MPI_Bcast(&total_wrong, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::cout << "# " << (total_wrong ? "FAILED" : "OK") << ": #wrong total " << total_wrong << std::endl;
    if (!f.keep) std::filesystem::remove_all(dir);
  }
  return total_wrong ? 1 : 0;
}

}  // namespace
}  // namespace shardtopk::bench

int main(int argc, char** argv) {
  return shardtopk::bench::run_on_ranks(argc, argv, "bench_updates", &shardtopk::bench::run);
}
