// Snapshots written while searches go on (docs/STORAGE.md "Updates", **Snapshots**).
//
// The view: one kSnapshot step, after every submitted write is applied, in which each rank notes
// its live slots; that is the state after the applied seq. The rows then travel to rank 0 one
// block per kSnapshotBlock step, in rank order, and a thread on rank 0 writes them into the file
// and commits it, off the index thread. Steps are ordered with searches and writes by the
// collective loop, so a search waits for one block at most. A write applied between two steps
// would overwrite slots whose rows have not been sent: apply_ops first keeps those rows as they
// were (preserve_for_snapshot), and the block that sends them takes the kept copy. Writes after
// the view's seq go to the log as ever and stay there (the commit removes records <= seq only).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/log.hpp"
#include "index/update_coordinator.hpp"

namespace shardtopk {
namespace {

// A block is what a search may wait for: rank 0 sizes each so that a step takes about
// kStepTarget (from the last step's time), between kMinBlockRows rows and kMaxBlockBytes of
// float32 rows, starting at kFirstBlockBytes.
constexpr double kStepTargetMs = 1.0;
constexpr std::int64_t kMinBlockRows = 16;
constexpr std::int64_t kFirstBlockBytes = 256 << 10;
constexpr std::int64_t kMaxBlockBytes = 16 << 20;
constexpr std::size_t kQueuedBlocks = 8;  // blocks rank 0 holds for its file writer
constexpr int kWriterNice = 10;

/// One block of a snapshot as rank 0 receives it.
struct Block {
  std::int64_t rows = 0;
  std::vector<std::int64_t> ids;            // [rows]
  std::vector<float> vectors;               // [rows, dim]
  std::vector<std::vector<std::uint64_t>> columns;  // [ncols][rows] value bits
};

}  // namespace

/// Rank 0's thread that writes the blocks into the SnapshotWriter and commits it.
class SnapshotFileWriter {
 public:
  SnapshotFileWriter(std::unique_ptr<SnapshotWriter> writer, const AttributeSchema& schema)
      : writer_(std::move(writer)), schema_(schema), thread_([this] { run(); }) {}
  ~SnapshotFileWriter() {
    {
      std::lock_guard<std::mutex> l(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    writer_.reset();  // not committed: its files are removed
  }

  bool has_room() const {
    std::lock_guard<std::mutex> l(m_);
    return queue_.size() < kQueuedBlocks || !error_.empty();
  }
  void push(Block b) {
    {
      std::lock_guard<std::mutex> l(m_);
      queue_.push_back(std::move(b));
    }
    cv_.notify_all();
  }
  /// Every block was pushed: commit once they are written.
  void finish() {
    {
      std::lock_guard<std::mutex> l(m_);
      finishing_ = true;
    }
    cv_.notify_all();
  }
  /// Waits up to `wait` for room or the end.
  void wait(std::chrono::microseconds wait) {
    std::unique_lock<std::mutex> l(m_);
    changed_.wait_for(l, wait, [&] {
      return done_ || !error_.empty() || (!finishing_ && queue_.size() < kQueuedBlocks);
    });
  }
  bool done() const {
    std::lock_guard<std::mutex> l(m_);
    return done_;
  }
  std::string error() const {
    std::lock_guard<std::mutex> l(m_);
    return error_;
  }
  const std::string& path() const { return path_; }  // once done()

 private:
  void run() {
    // Below the index thread: on CPU ranks the file's writing and checksum take the cores the
    // searches leave (Linux: a thread's own nice value; failure only costs that).
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kWriterNice);
    std::unique_lock<std::mutex> l(m_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || !queue_.empty() || finishing_; });
      if (stop_) return;
      if (!queue_.empty()) {
        Block b = std::move(queue_.front());
        queue_.pop_front();
        l.unlock();
        changed_.notify_all();
        std::string err;
        try {
          if (error_.empty()) write(b);
        } catch (const std::exception& e) {
          err = e.what();
        }
        l.lock();
        if (!err.empty() && error_.empty()) error_ = err;
        changed_.notify_all();
        continue;
      }
      // finishing_ and every block written
      if (error_.empty()) {
        l.unlock();
        std::string err, path;
        try {
          path = writer_->commit();
        } catch (const std::exception& e) {
          err = e.what();
        }
        l.lock();
        if (err.empty()) {
          path_ = path;
          done_ = true;
        } else {
          error_ = err;
        }
      }
      changed_.notify_all();
      cv_.wait(l, [&] { return stop_; });
      return;
    }
  }

  void write(const Block& b) {
    std::vector<AttributeColumnView> views;
    for (std::size_t c = 0; c < schema_.size(); ++c)
      views.push_back(AttributeColumnView{schema_[c].name, schema_[c].type, b.columns[c].data()});
    writer_->write(b.rows, b.ids.data(), b.vectors.data(), views);
  }

  std::unique_ptr<SnapshotWriter> writer_;
  const AttributeSchema& schema_;
  mutable std::mutex m_;
  std::condition_variable cv_, changed_;
  std::deque<Block> queue_;
  bool stop_ = false, finishing_ = false, done_ = false;
  std::string error_, path_;
  std::thread thread_;  // last: starts once the members above exist
};

/// A row as it was at the snapshot's seq, kept because a write replaced it before it was sent.
struct KeptRow {
  std::int64_t id = 0;
  std::vector<float> vector;
  std::vector<std::uint64_t> columns;
};

struct UpdateCoordinator::SnapshotRun {
  // ---- every rank
  std::uint64_t seq = 0;
  std::vector<std::int64_t> slots;   // this rank's slots live at seq, ascending
  std::vector<std::int64_t> counts;  // [ranks] rows per rank
  int next_rank = 0;                 // the next block: its rank and its first row there
  std::int64_t next_row = 0;
  std::int64_t block_rows = 1;       // rank 0: the next block's rows at most
  std::unordered_map<std::int64_t, KeptRow> kept;  // slot -> its row at seq (not sent yet)

  // ---- rank 0
  std::unique_ptr<SnapshotFileWriter> file;
  std::int64_t total = 0;
  std::string why;  // the policy's reason ("" asked for)
  std::int64_t log_bytes = 0;
  double age_s = 0;
  bool by_size = false, by_age = false;

  bool sent_all() const { return next_rank >= static_cast<int>(counts.size()); }
  /// This rank's rows already sent.
  std::int64_t sent(int me) const {
    if (me < next_rank) return counts[static_cast<std::size_t>(me)];
    return me == next_rank ? next_row : 0;
  }
  void skip_empty() {
    while (next_rank < static_cast<int>(counts.size()) && next_row >= counts[static_cast<std::size_t>(next_rank)]) {
      ++next_rank;
      next_row = 0;
    }
  }
};

// ------------------------------------------------------------------------------ set-up

UpdateCoordinator::UpdateCoordinator(const Config& cfg, Metric metric, const AttributeSchema& schema,
                                     const IngestStats& stats, SearchProtocol& protocol)
    : cfg_(cfg),
      metric_(metric),
      schema_(schema),
      stats_(stats),
      protocol_(protocol),
      engine_(&protocol.engine()),
      host_comm_(&protocol.host()) {}

UpdateCoordinator::~UpdateCoordinator() = default;

// ------------------------------------------------------------------------------ synchronous

SnapshotResult UpdateCoordinator::snapshot() {
  if (rank() != 0) {
    protocol_.follow_one(/*lock_step=*/true);
    while (snap_) protocol_.follow_one(/*lock_step=*/true);
    return {};
  }
  if (!upd_) {
    reject_write("read-only");
    throw WriteError(WriteError::Kind::kReadOnly, "the index is read-only: storage.dir is not set (snapshots are "
                                                  "written there)");
  }
  if (const std::optional<SnapshotResult> r = start_snapshot()) return *r;
  const SnapshotProgress p = finish_snapshot();
  if (!p.failed.empty()) throw Error(p.failed);
  return *p.done;
}

std::optional<SnapshotResult> UpdateCoordinator::snapshot_if_log_exceeds() {
  const std::int64_t limit = cfg_.storage.snapshot_log_bytes;  // the same on every rank
  const double interval = cfg_.storage.snapshot_interval_s;    // likewise
  if (!upd_ || (limit <= 0 && interval <= 0)) return std::nullopt;
  if (rank() != 0) {
    try {
      protocol_.follow_one(/*lock_step=*/true);
      while (snap_) protocol_.follow_one(/*lock_step=*/true);
    } catch (const CommError&) {
      throw;
    } catch (const std::exception& e) {  // rank 0 logs the failure and goes on: so do the others
      spdlog::warn("rank {}: automatic snapshot failed: {}", rank(), e.what());
    }
    return std::nullopt;
  }
  if (!start_snapshot_if_due()) return std::nullopt;
  try {
    return finish_snapshot().done;
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {  // a rank failed to read its rows: every rank knows
    SnapshotProgress p;
    p.failed = e.what();
    p.automatic = true;
    end_snapshot_run(p);
    return std::nullopt;
  }
}

SnapshotProgress UpdateCoordinator::finish_snapshot() {
  for (;;) {
    SnapshotProgress p = snapshot_step();
    if (!p.running) return p;
    if (!p.progressed && snap_ && snap_->file) snap_->file->wait(std::chrono::milliseconds(50));
  }
}

// ------------------------------------------------------------------------------ background

std::optional<SnapshotResult> UpdateCoordinator::start_snapshot() {
  if (!upd_) {
    reject_write("read-only");
    throw WriteError(WriteError::Kind::kReadOnly, "the index is read-only: storage.dir is not set (snapshots are "
                                                  "written there)");
  }
  if (snap_) finish_snapshot();  // its own outcome is reported to whoever started it, not here
  apply_writes();
  return begin_snapshot_step("");
}

std::string UpdateCoordinator::snapshot_due() {
  const std::int64_t limit = cfg_.storage.snapshot_log_bytes;
  const double interval = cfg_.storage.snapshot_interval_s;
  Updates& u = *upd_;
  const StorageStats st = u.storage->stats();
  const std::int64_t bytes = st.log_bytes;
  // By size: the log holds more than snapshot_log_bytes. By age: records after a snapshot (or
  // after the start, without one) older than snapshot_interval_s.
  const bool by_size = limit > 0 && bytes > limit && bytes > u.auto_snapshot_after_bytes;
  const bool by_age = interval > 0 && st.records_since_snapshot > 0 && st.seconds_since_snapshot >= interval &&
                      st.seconds_since_snapshot >= u.auto_snapshot_after_s;
  if (!by_size && !by_age) return "";
  return by_size ? fmt::format("the log held {} bytes (storage.snapshot_log_bytes {})", bytes, limit)
                 : fmt::format("the snapshot was {:.0f} s old (storage.snapshot_interval_s {})",
                               st.seconds_since_snapshot, interval);
}

bool UpdateCoordinator::start_snapshot_if_due() {
  const std::int64_t limit = cfg_.storage.snapshot_log_bytes;
  const double interval = cfg_.storage.snapshot_interval_s;
  if (!upd_ || (limit <= 0 && interval <= 0) || rank() != 0) return false;
  const std::string why = snap_ ? "" : snapshot_due();
  if (why.empty()) {
    StepHeader h;  // a step that does nothing: "no new snapshot"
    h.op = static_cast<std::int32_t>(IndexOp::kSnapshot);
    h.k = 1;
    host_comm_->broadcast(&h, sizeof h, 0);
    return false;
  }
  try {
    apply_writes();
    return !begin_snapshot_step(why).has_value();
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {  // it could not start (the file, a rank): retry later
    const StorageStats st = upd_->storage->stats();
    snap_.reset();
    if (limit > 0 && st.log_bytes > limit) upd_->auto_snapshot_after_bytes = st.log_bytes + limit;
    if (interval > 0) upd_->auto_snapshot_after_s = st.seconds_since_snapshot + interval;
    spdlog::warn("updates: automatic snapshot ({}) failed: {}; the log keeps every record", why, e.what());
    return false;
  }
}

std::optional<SnapshotResult> UpdateCoordinator::begin_snapshot_step(const std::string& why) {
  Updates& u = *upd_;
  // Nothing new since the current snapshot: that one (a step all the same, for lock step).
  const bool current = !u.storage->snapshot_path().empty() && u.storage->snapshot_seq() == u.applied_seq;
  StepHeader h;
  h.op = static_cast<std::int32_t>(IndexOp::kSnapshot);
  h.k = current ? 1 : 0;
  host_comm_->broadcast(&h, sizeof h, 0);
  if (current) return SnapshotResult{u.storage->snapshot_path(), u.applied_seq, u.dir->live_rows()};
  begin_snapshot_run();
  snap_->why = why;
  if (!why.empty()) {
    const StorageStats st = u.storage->stats();
    snap_->log_bytes = st.log_bytes;
    snap_->age_s = st.seconds_since_snapshot;
    snap_->by_size = cfg_.storage.snapshot_log_bytes > 0 && st.log_bytes > cfg_.storage.snapshot_log_bytes;
    snap_->by_age = !snap_->by_size;
  }
  spdlog::info("updates: {}snapshot of seq {} ({} rows) started", why.empty() ? "" : why + ": ", snap_->seq,
               snap_->total);
  return std::nullopt;
}

// Every rank: the view. A failure (rank 0 cannot begin the file) is reported to every rank.
void UpdateCoordinator::begin_snapshot_run() {
  Updates& u = *upd_;
  auto run = std::make_unique<SnapshotRun>();
  run->seq = u.applied_seq;
  for (std::size_t s = 0; s < u.live.size(); ++s)
    if (u.live[s]) run->slots.push_back(static_cast<std::int64_t>(s));
  const std::int64_t mine = static_cast<std::int64_t>(run->slots.size());
  run->counts.resize(static_cast<std::size_t>(world_size()));
  host_comm_->allgather(&mine, run->counts.data(), sizeof mine);
  for (auto c : run->counts) run->total += c;
  run->block_rows = cfg_.testing.snapshot_block_rows > 0
                        ? cfg_.testing.snapshot_block_rows
                        : std::max<std::int64_t>(kMinBlockRows, kFirstBlockBytes / (4 * std::max<std::int64_t>(stats_.dim, 1)));
  bool ok = true;
  std::string msg;
  if (rank() == 0) {
    try {
      SnapshotSpec spec;
      spec.seq = run->seq;
      spec.rows = run->total;
      spec.dtype = engine_->info().dtype == Dtype::kFloat16 ? Dtype::kFloat16 : Dtype::kFloat32;
      for (const auto& a : schema_) spec.attributes.emplace_back(a.name, a.type);
      spec.normalized = metric_ == Metric::kCosine;
      run->file = std::make_unique<SnapshotFileWriter>(u.storage->begin_snapshot(spec), schema_);
    } catch (const std::exception& e) {
      ok = false;
      msg = e.what();
    }
  }
  host_comm_->check(ok, msg);  // RemoteError on every rank: no run
  run->skip_empty();
  if (rank() == 0 && run->sent_all()) run->file->finish();
  if (rank() != 0 && run->sent_all()) return;  // nothing to send: rank 0 only waits for its file
  snap_ = std::move(run);
}

SnapshotProgress UpdateCoordinator::snapshot_step() {
  SnapshotProgress p;
  if (rank() != 0 || !snap_) return p;
  SnapshotRun& run = *snap_;
  p.automatic = !run.why.empty();
  const std::string failed = run.file->error();
  if (!failed.empty()) {
    if (!run.sent_all()) {  // the followers drop their part of the run
      StepHeader h;
      h.op = static_cast<std::int32_t>(IndexOp::kSnapshotBlock);
      h.k = 1;
      host_comm_->broadcast(&h, sizeof h, 0);
    }
    p.failed = detail::concat("snapshot of seq ", run.seq, " failed: ", failed);
    p.progressed = true;
    end_snapshot_run(p);
    return p;
  }
  if (run.sent_all()) {
    p.running = true;
    if (!run.file->done()) return p;  // the file is being written and committed
    p.running = false;
    p.progressed = true;
    p.done = SnapshotResult{run.file->path(), run.seq, run.total};
    end_snapshot_run(p);
    return p;
  }
  p.running = true;
  if (!run.file->has_room()) return p;
  StepHeader h;
  h.op = static_cast<std::int32_t>(IndexOp::kSnapshotBlock);
  h.batch = static_cast<std::int32_t>(run.block_rows);
  const auto t0 = std::chrono::steady_clock::now();
  host_comm_->broadcast(&h, sizeof h, 0);
  try {
    snapshot_block_step(false, h.batch);
    if (snap_ && cfg_.testing.snapshot_block_rows == 0) {  // the next block's rows, for a step of about kStepTargetMs
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const std::int64_t max_rows = std::max<std::int64_t>(kMinBlockRows, kMaxBlockBytes / (4 * std::max<std::int64_t>(stats_.dim, 1)));
      if (ms > 1.25 * kStepTargetMs || ms < 0.75 * kStepTargetMs)
        run.block_rows = std::clamp<std::int64_t>(
            static_cast<std::int64_t>(static_cast<double>(run.block_rows) * kStepTargetMs / std::max(ms, 1e-3)),
            kMinBlockRows, std::min<std::int64_t>(max_rows, std::numeric_limits<std::int32_t>::max()));
    }
  } catch (const RemoteError& e) {  // a rank failed to read its rows: the run is dropped everywhere
    p.running = false;
    p.failed = detail::concat("snapshot of seq ", run.seq, " failed: ", e.what());
    end_snapshot_run(p);
    if (p.automatic) return p;
    throw;
  }
  p.progressed = true;
  return p;
}

void UpdateCoordinator::end_snapshot_run(const SnapshotProgress& p) {
  if (snap_ && p.automatic) {
    Updates& u = *upd_;
    const SnapshotRun& run = *snap_;
    if (p.done) {
      u.auto_snapshot_after_bytes = 0;
      u.auto_snapshot_after_s = 0;
    } else {
      if (run.by_size) u.auto_snapshot_after_bytes = run.log_bytes + cfg_.storage.snapshot_log_bytes;
      if (run.by_age) u.auto_snapshot_after_s = run.age_s + cfg_.storage.snapshot_interval_s;
      spdlog::warn("updates: automatic snapshot ({}) failed: {}; the log keeps every record, next try {}", run.why,
                   p.failed,
                   run.by_size ? fmt::format("past {} bytes", u.auto_snapshot_after_bytes)
                               : fmt::format("in {:.0f} s", cfg_.storage.snapshot_interval_s));
    }
  }
  if (p.done)
    spdlog::info("updates: {}snapshot {} at seq {} ({} rows)", snap_ && !snap_->why.empty() ? snap_->why + ": " : "",
                 p.done->path, p.done->seq, p.done->rows);
  snap_.reset();
}

// Every rank: the next block (at most `rows` rows, as rank 0's header says) from its owner to
// rank 0 (a broadcast: every rank knows the counts, so all take part in the same steps), then a
// status check.
void UpdateCoordinator::snapshot_block_step(bool abort, std::int64_t rows) {
  if (abort || !snap_) {
    snap_.reset();
    return;
  }
  SnapshotRun& run = *snap_;
  const std::int64_t dim = stats_.dim, ncols = static_cast<std::int64_t>(schema_.size());
  const int r = run.next_rank;
  const std::int64_t b0 = run.next_row;
  const std::int64_t m = std::min(std::max<std::int64_t>(rows, 1), run.counts[static_cast<std::size_t>(r)] - b0);
  // [m] ids, [m, dim] float32 (padded to 8 bytes), [ncols, m] attribute value bits
  const std::int64_t vec_bytes = (4 * m * dim + 7) / 8 * 8;
  std::vector<std::uint8_t> block(static_cast<std::size_t>(8 * m + vec_bytes + 8 * ncols * m), 0);
  auto* ids = reinterpret_cast<std::int64_t*>(block.data());
  auto* v = reinterpret_cast<float*>(block.data() + 8 * m);
  auto* c0 = reinterpret_cast<std::uint64_t*>(block.data() + 8 * m + vec_bytes);
  bool ok = true;
  std::string msg;
  if (r == rank()) {
    try {
      const AttributeTable& table = engine_->attribute_table();
      const std::int64_t* slots = run.slots.data() + b0;
      engine_->read_rows(slots, m, v);
      for (std::int64_t i = 0; i < m; ++i) {
        const auto it = run.kept.find(slots[i]);
        if (it != run.kept.end()) {  // replaced since the view: the row as it was
          ids[i] = it->second.id;
          std::memcpy(v + i * dim, it->second.vector.data(), 4 * static_cast<std::size_t>(dim));
          for (std::int64_t c = 0; c < ncols; ++c) c0[c * m + i] = it->second.columns[static_cast<std::size_t>(c)];
          run.kept.erase(it);
          continue;
        }
        const auto s = static_cast<std::size_t>(slots[i]);
        ids[i] = table.global_ids()[s];
        for (std::int64_t c = 0; c < ncols; ++c) {
          const AttributeColumn& col = table.column(static_cast<int>(c));
          std::uint64_t bits = 0;
          if (col.type == AttributeType::kInt64) std::memcpy(&bits, &col.ints[s], 8);
          else std::memcpy(&bits, &col.reals[s], 8);
          c0[c * m + i] = bits;
        }
      }
    } catch (const std::exception& e) {
      ok = false;
      msg = e.what();
    }
  }
  if (r != 0) host_comm_->broadcast(block.data(), block.size(), r);
  try {
    host_comm_->check(ok, msg);
  } catch (const RemoteError&) {
    if (rank() != 0) snap_.reset();  // rank 0 ends its run in snapshot_step
    throw;
  }
  run.next_row += m;
  run.skip_empty();
  if (rank() == 0) {
    Block b;
    b.rows = m;
    b.ids.assign(ids, ids + m);
    b.vectors.assign(v, v + m * dim);
    for (std::int64_t c = 0; c < ncols; ++c) b.columns.emplace_back(c0 + c * m, c0 + (c + 1) * m);
    run.file->push(std::move(b));
    if (run.sent_all()) run.file->finish();
  } else if (run.sent_all()) {
    snap_.reset();
  }
}

void UpdateCoordinator::preserve_for_snapshot(const std::vector<std::int64_t>& slots) {
  if (!snap_) return;
  SnapshotRun& run = *snap_;
  const std::int64_t sent = run.sent(rank());
  const auto& mine = run.slots;
  std::vector<std::int64_t> keep;
  for (const std::int64_t s : slots) {
    const auto it = std::lower_bound(mine.begin(), mine.end(), s);
    if (it == mine.end() || *it != s || it - mine.begin() < sent || run.kept.count(s)) continue;
    keep.push_back(s);
  }
  if (keep.empty()) return;
  const std::int64_t dim = stats_.dim;
  std::vector<float> rows(keep.size() * static_cast<std::size_t>(dim));
  engine_->read_rows(keep.data(), static_cast<std::int64_t>(keep.size()), rows.data());
  const AttributeTable& table = engine_->attribute_table();
  for (std::size_t i = 0; i < keep.size(); ++i) {
    const auto s = static_cast<std::size_t>(keep[i]);
    KeptRow k;
    k.id = table.global_ids()[s];
    k.vector.assign(rows.begin() + static_cast<std::ptrdiff_t>(i * dim),
                    rows.begin() + static_cast<std::ptrdiff_t>((i + 1) * dim));
    for (std::size_t c = 0; c < schema_.size(); ++c) {
      const AttributeColumn& col = table.column(static_cast<int>(c));
      std::uint64_t bits = 0;
      if (col.type == AttributeType::kInt64) std::memcpy(&bits, &col.ints[s], 8);
      else std::memcpy(&bits, &col.reals[s], 8);
      k.columns.push_back(bits);
    }
    run.kept.emplace(keep[i], std::move(k));
  }
}

}  // namespace shardtopk
