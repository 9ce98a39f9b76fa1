// The update coordinator of a ShardedIndex (docs/STORAGE.md "Updates"): rank 0 validates and plans each write
// against its RowDirectory (the state after every submitted write), logs it, and broadcasts
// planned writes to every rank, which applies its part between searches (snapshots and deletes by
// filter, which gather every rank's live rows: update_gather.cpp).
//
// Order and visibility: rank 0 plans writes in submission order and the log numbers them in
// the same order (one thread submits), so that the directory after write s is the state a replay
// of the log up to s rebuilds. Planned writes are applied only once durable, in seq order, and a
// group of them in one step between two searches: no search sees part of a request.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>

#include "core/half.hpp"
#include "core/log.hpp"
#include "index/admission.hpp"
#include "index/update_coordinator.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk {
namespace {

constexpr std::size_t kBroadcastChunk = 256u << 20;       // bytes per MPI broadcast

std::string schema_names(const AttributeSchema& schema) {
  if (schema.empty()) return "none";
  std::string s;
  for (const auto& a : schema) s += (s.empty() ? "" : ", ") + a.name + " (" + to_string(a.type) + ")";
  return s;
}

[[noreturn]] void invalid(const std::string& what) { throw WriteError(WriteError::Kind::kInvalid, what); }

void check_distinct(const std::int64_t* ids, std::int64_t n) {
  std::vector<std::int64_t> sorted(ids, ids + n);
  std::sort(sorted.begin(), sorted.end());
  const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  if (dup != sorted.end()) invalid(detail::concat("id ", *dup, " appears more than once in the request"));
}

}  // namespace

void broadcast_bytes(Communicator& comm, std::vector<std::uint8_t>& buf, int root) {
  std::uint64_t n = buf.size();
  comm.broadcast(&n, sizeof n, root);
  buf.resize(static_cast<std::size_t>(n));
  for (std::size_t at = 0; at < buf.size(); at += kBroadcastChunk)
    comm.broadcast(buf.data() + at, std::min(kBroadcastChunk, buf.size() - at), root);
}

// ------------------------------------------------------------------------------ set-up

// The constructor and destructor are in update_snapshot.cpp (where SnapshotRun is complete).

std::int64_t UpdateCoordinator::k_limit_rows() const { return upd_ ? upd_->capacity_total : stats_.total_rows; }

std::size_t UpdateCoordinator::pending_writes() const { return upd_ ? upd_->pending.size() : 0; }

UpdateStats UpdateCoordinator::update_stats() const {
  UpdateStats s;
  if (!upd_) {
    s.live_rows = stats_.total_rows;
    s.capacity_rows = stats_.total_rows;
    return s;
  }
  s.writable = true;
  s.live_rows = upd_->live_rows.load();
  s.tombstones = upd_->tombstones.load();
  s.capacity_rows = upd_->capacity_total;
  s.applied_seq = upd_->applied_seq.load();
  if (upd_->storage) {
    const StorageStats st = upd_->storage->stats();
    s.snapshot_seq = st.snapshot_seq;
    s.snapshot_path = st.snapshot_path;
    s.log_bytes = st.log_bytes;
    s.log_records = st.records_since_snapshot;
  }
  return s;
}

void UpdateCoordinator::enable_updates(std::unique_ptr<Storage> storage, std::uint64_t base_seq) {
  SHARDTOPK_EXPECTS(!upd_, "enable_updates: the index is updatable already");
  auto u = std::make_unique<Updates>();
  const int world = world_size();
  const EngineInfo info = engine_->info();
  u->dtype = info.dtype;
  // Every rank's rows and slots, and whether its ids are the plain global row positions.
  struct Shape {
    std::int64_t rows, capacity, implicit;
  };
  std::vector<Shape> shapes(static_cast<std::size_t>(world));
  std::int64_t implicit = 1;
  {
    const auto& gids = engine_->attribute_table().global_ids();
    for (std::int64_t r = 0; r < info.rows && implicit; ++r)
      if (gids[static_cast<std::size_t>(r)] != stats_.rows.lo + r) implicit = 0;
  }
  const Shape mine{info.rows, info.capacity, implicit};
  host_comm_->allgather(&mine, shapes.data(), sizeof mine);
  std::int64_t lo = 0, max_rows = 0;
  bool all_implicit = true;
  for (int r = 0; r < world; ++r) {
    if (r == rank() && lo != stats_.rows.lo) all_implicit = false;  // not the shard plan's order
    lo += shapes[static_cast<std::size_t>(r)].rows;
    max_rows = std::max(max_rows, shapes[static_cast<std::size_t>(r)].rows);
    all_implicit = all_implicit && shapes[static_cast<std::size_t>(r)].implicit != 0;
  }
  std::int64_t flag = all_implicit ? 1 : 0, all_flags_ok = 1;
  std::vector<std::int64_t> flags(static_cast<std::size_t>(world));
  host_comm_->allgather(&flag, flags.data(), sizeof flag);
  for (auto f : flags) all_flags_ok &= f;
  std::vector<std::int64_t> base_ids;
  if (!all_flags_ok) {  // the ids themselves, padded to the largest shard
    std::vector<std::int64_t> send(static_cast<std::size_t>(std::max<std::int64_t>(max_rows, 1)), kPadId);
    const auto& gids = engine_->attribute_table().global_ids();
    std::copy(gids.begin(), gids.begin() + info.rows, send.begin());
    std::vector<std::int64_t> all(send.size() * static_cast<std::size_t>(world));
    host_comm_->allgather(send.data(), all.data(), send.size() * sizeof(std::int64_t));
    if (rank() == 0)
      for (int r = 0; r < world; ++r)
        base_ids.insert(base_ids.end(), all.begin() + static_cast<std::ptrdiff_t>(r * send.size()),
                        all.begin() + static_cast<std::ptrdiff_t>(r * send.size() + shapes[r].rows));
  }
  for (const Shape& s : shapes) {
    u->capacities.push_back(s.capacity);
    u->capacity_total += s.capacity;
  }
  u->live.assign(static_cast<std::size_t>(info.capacity), 0);
  std::fill(u->live.begin(), u->live.begin() + info.rows, 1);
  u->applied_seq = base_seq;

  bool ok = true;
  std::string msg;
  if (rank() == 0) {
    try {
      std::vector<std::int64_t> rows, caps;
      for (const Shape& s : shapes) {
        rows.push_back(s.rows);
        caps.push_back(s.capacity);
      }
      u->dir = std::make_unique<RowDirectory>(rows, caps, base_ids);
      u->storage = storage ? std::move(storage)
                           : std::make_unique<Storage>(storage_options(cfg_.storage, stats_.dim, metric_));
      SHARDTOPK_EXPECTS(u->storage->snapshot_seq() == base_seq, "storage '", u->storage->options().dir,
                        "' holds a snapshot at seq ", u->storage->snapshot_seq(), " (", u->storage->snapshot_path(),
                        ") but the index was built from the state at seq ", base_seq,
                        ": open the directory through a config whose storage.dir names it, which loads the "
                        "snapshot (Python: shardtopk.Index.open(config); C++: load_index(); or shardtopk serve)");
      u->submitted_seq = base_seq;
      u->live_rows = u->dir->live_rows();
    } catch (const std::exception& e) {
      ok = false;
      msg = e.what();
    }
  }
  host_comm_->check(ok, msg);
  upd_ = std::move(u);

  // Replay: rank 0 plans the log's records and applies them in steps; followers follow.
  ok = true;
  msg.clear();
  if (rank() == 0) {
    try {
      replay_log(base_seq);
    } catch (const CommError&) {
      throw;
    } catch (const std::exception& e) {
      ok = false;
      msg = e.what();
    }
    StepHeader h;
    h.op = static_cast<std::int32_t>(IndexOp::kReplayDone);
    host_comm_->broadcast(&h, sizeof h, 0);
  } else {
    while (!upd_->replay_done) protocol_.follow_one(/*lock_step=*/false);
  }
  try {
    host_comm_->check(ok, msg);
  } catch (...) {
    upd_.reset();
    throw;
  }
  if (rank() == 0)
    spdlog::info("updates: storage '{}', snapshot seq {}, {} log record(s) replayed, last seq {}; {} live rows, "
                 "capacity {} rows ({} rank(s))",
                 upd_->storage->options().dir, base_seq, upd_->applied_seq.load() - base_seq, upd_->applied_seq.load(),
                 upd_->dir->live_rows(), upd_->capacity_total, world);
}

// ------------------------------------------------------------------------------ planning (rank 0)

WriteResult UpdateCoordinator::plan_and_submit_upsert(const UpsertRows& rows, bool replay, std::uint64_t seq) {
  Updates& u = *upd_;
  const std::int64_t n = rows.rows, dim = stats_.dim;
  if (n < 1) invalid(detail::concat("an upsert needs at least one row (got ", n, ")"));
  if (!rows.ids || !rows.vectors) invalid("an upsert needs ids and vectors");
  check_distinct(rows.ids, n);
  // Attributes: exactly the corpus's, by name and type; `col[c]` is schema column c's values.
  std::vector<const void*> col(schema_.size(), nullptr);
  for (const AttributeColumnView& a : rows.attributes) {
    std::size_t c = 0;
    while (c < schema_.size() && schema_[c].name != a.name) ++c;
    if (c == schema_.size())
      invalid(detail::concat("unknown attribute '", a.name, "' (the corpus's attributes: ", schema_names(schema_), ")"));
    if (a.type != schema_[c].type)
      invalid(detail::concat("attribute '", a.name, "' is ", to_string(schema_[c].type), " in the corpus but ",
                             to_string(a.type), " in the request"));
    if (col[c]) invalid(detail::concat("attribute '", a.name, "' is given twice"));
    if (!a.data) invalid(detail::concat("attribute '", a.name, "' has no values"));
    col[c] = a.data;
  }
  for (std::size_t c = 0; c < schema_.size(); ++c) {
    if (!col[c])
      invalid(detail::concat("attribute '", schema_[c].name, "' is missing: every row needs a value of every corpus "
                             "attribute (", schema_names(schema_), ")"));
    if (schema_[c].type == AttributeType::kFloat64)
      for (std::int64_t i = 0; i < n; ++i)
        if (std::isnan(static_cast<const double*>(col[c])[i]))
          invalid(detail::concat("attribute '", schema_[c].name, "' of id ", rows.ids[i], " is NaN"));
  }
  // Values: finite, representable in the engine's storage type, norms admissible.
  const Dtype dt = u.dtype;
  NormSummary norms;
  std::vector<double> row_norms(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    if (rows.ids[i] == kPadId) invalid(detail::concat("id ", kPadId, " is reserved"));
    const float* x = rows.vectors + i * dim;
    // The float64 sum of squares is finite exactly when every value is (squares cannot cancel,
    // and finite floats cannot overflow it): one pass checks both.
    const double norm = row_norm(x, dim);
    if (!std::isfinite(norm))
      for (std::int64_t d = 0; d < dim; ++d)
        if (!std::isfinite(x[d]))
          invalid(detail::concat("row id ", rows.ids[i], " has a non-finite value (", x[d], ") at column ", d));
    if (dt != Dtype::kFloat32 && metric_ != Metric::kCosine) {
      const std::int64_t d = half::first_overflow(x, dim, dt == Dtype::kBFloat16);
      if (d >= 0)
        invalid(detail::concat("row id ", rows.ids[i], " value ", x[d], " at column ", d, " overflows ", to_string(dt),
                               " (engine.dtype)"));
    }
    row_norms[static_cast<std::size_t>(i)] = norm;
    if (metric_ == Metric::kCosine && !(norm > 0.0))
      invalid(detail::concat("row id ", rows.ids[i], " has zero norm and cannot be scored by cosine similarity"));
    if (norms.row < 0 || norm > norms.max_norm) norms = NormSummary{norm, rows.ids[i]};
  }
  try {
    check_corpus_norms(metric_, norms, dim, "upserted row id");
    // A logged record was acknowledged: replayed whatever its norm (the bound follows it).
    if (!replay) check_upsert_norm(metric_, norms);
  } catch (const Error& e) {
    invalid(e.what());
  }
  // Capacity: the rows whose id is live replace theirs (their slots are freed first).
  std::int64_t replaced = 0;
  for (std::int64_t i = 0; i < n; ++i) replaced += u.dir->find(rows.ids[i]).has_value() ? 1 : 0;
  if (u.dir->free_slots() < n - replaced)
    throw WriteError(WriteError::Kind::kCapacity,
                     detail::concat("capacity exhausted: the upsert needs ", n - replaced, " new slot(s) but ",
                                    u.dir->free_slots(), " of ", u.dir->capacity_rows(), " are free (",
                                    u.dir->live_rows(), " live rows; storage.capacity_rows per rank: ",
                                    u.capacities.front(), ", ", u.capacities.size(), " rank(s))"));

  if (!replay) {
    UpsertRows logged = rows;  // the log's own checks (names, sizes) come before any planning
    seq = u.storage->submit_upsert(logged);
  }
  WriteOp op = take_op();  // empty, perhaps with a recycled op's capacity
  op.seq = seq;
  for (std::int64_t i = 0; i < n; ++i)
    if (u.dir->find(rows.ids[i])) op.kills.push_back(u.dir->erase(rows.ids[i]));
  op.places.reserve(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) op.places.push_back(u.dir->place(rows.ids[i]));
  op.ids.assign(rows.ids, rows.ids + n);
  op.vectors.assign(rows.vectors, rows.vectors + n * dim);
  op.columns.resize(schema_.size());
  for (std::size_t c = 0; c < schema_.size(); ++c) {
    const auto* v = static_cast<const std::uint64_t*>(col[c]);
    op.columns[c].assign(v, v + n);
  }
  op.max_norm = norms.max_norm;
  op.max_norm_id = norms.row;
  op.norms = std::move(row_norms);
  u.pending_bytes += op.encoded_bytes(dim);
  u.pending.push_back(std::move(op));
  u.submitted_seq = seq;
  return WriteResult{seq, n};
}

WriteResult UpdateCoordinator::plan_and_submit_remove(const std::int64_t* ids, std::int64_t n, bool replay,
                                                  std::uint64_t seq) {
  Updates& u = *upd_;
  if (n < 1) invalid(detail::concat("a delete needs at least one id (got ", n, ")"));
  if (!ids) invalid("a delete needs ids");
  check_distinct(ids, n);
  std::int64_t live = 0;
  for (std::int64_t i = 0; i < n; ++i) live += u.dir->find(ids[i]).has_value() ? 1 : 0;
  if (live == 0 && !replay) return WriteResult{u.submitted_seq, 0};  // nothing to log
  if (!replay) seq = u.storage->submit_delete(ids, n);
  WriteOp op = take_op();  // empty, perhaps with a recycled op's capacity
  op.seq = seq;
  for (std::int64_t i = 0; i < n; ++i)
    if (u.dir->find(ids[i])) op.kills.push_back(u.dir->erase(ids[i]));
  op.columns.resize(schema_.size());
  u.pending_bytes += op.encoded_bytes(stats_.dim);
  u.pending.push_back(std::move(op));
  u.submitted_seq = seq;
  return WriteResult{seq, live};
}

WriteResult UpdateCoordinator::submit_upsert(const UpsertRows& rows) {
  SHARDTOPK_EXPECTS(rank() == 0, "submit_upsert is for rank 0");
  if (!upd_)
    throw WriteError(WriteError::Kind::kReadOnly, "the index is read-only: storage.dir is not set (updates need a "
                                                  "directory for their write-ahead log)");
  SHARDTOPK_EXPECTS(upd_->failure.empty(), "writes are refused after a log failure: ", upd_->failure);
  return plan_and_submit_upsert(rows, /*replay=*/false, 0);
}

WriteResult UpdateCoordinator::submit_remove(const std::int64_t* ids, std::int64_t n) {
  SHARDTOPK_EXPECTS(rank() == 0, "submit_remove is for rank 0");
  if (!upd_)
    throw WriteError(WriteError::Kind::kReadOnly, "the index is read-only: storage.dir is not set (updates need a "
                                                  "directory for their write-ahead log)");
  SHARDTOPK_EXPECTS(upd_->failure.empty(), "writes are refused after a log failure: ", upd_->failure);
  return plan_and_submit_remove(ids, n, /*replay=*/false, 0);
}

// ------------------------------------------------------------------------------ applying

void UpdateCoordinator::apply_writes() {
  SHARDTOPK_EXPECTS(rank() == 0, "apply_writes is for rank 0");
  if (!upd_ || upd_->pending.empty()) return;
  Updates& u = *upd_;
  try {
    u.storage->wait_durable(u.pending.back().seq);
  } catch (const std::exception& e) {
    // Not known to be durable: never applied here; a restart replays what the log holds.
    u.failure = e.what();
    u.pending.clear();
    u.pending_bytes = 0;
    throw;
  }
  broadcast_and_apply(&u.pending);
}

// ------------------------------------------------------------------------------ the collective calls

void UpdateCoordinator::reject_write(const std::string&) {
  StepHeader h;
  h.op = static_cast<std::int32_t>(IndexOp::kRejected);
  host_comm_->broadcast(&h, sizeof h, 0);
}

WriteResult UpdateCoordinator::upsert(const UpsertRows& rows) {
  if (rank() != 0) {
    protocol_.follow_one(/*lock_step=*/true);
    return {};
  }
  WriteResult r;
  try {
    r = submit_upsert(rows);
  } catch (const std::exception& e) {
    reject_write(e.what());
    throw;
  }
  apply_writes();
  return r;
}

WriteResult UpdateCoordinator::remove(const std::int64_t* ids, std::int64_t n) {
  if (rank() != 0) {
    protocol_.follow_one(/*lock_step=*/true);
    return {};
  }
  WriteResult r;
  try {
    r = submit_remove(ids, n);
  } catch (const std::exception& e) {
    reject_write(e.what());
    throw;
  }
  if (pending_writes() > 0) apply_writes();
  else broadcast_and_apply(&upd_->pending);  // nothing was live: an empty step keeps lock step
  return r;
}

WriteResult UpdateCoordinator::remove_matching(const FilterProgram& filter) {
  if (rank() != 0) {
    protocol_.follow_one(/*lock_step=*/true);
    protocol_.follow_one(/*lock_step=*/true);
    return {};
  }
  try {
    if (!upd_)
      throw WriteError(WriteError::Kind::kReadOnly, "the index is read-only: storage.dir is not set (updates need a "
                                                    "directory for their write-ahead log)");
    try {
      check_filter_fits(filter, schema_);
    } catch (const Error& e) {
      invalid(e.what());
    }
  } catch (const std::exception& e) {
    reject_write(e.what());  // lock-step followers throw at their first step
    throw;
  }
  apply_writes();  // the rows must be found in the state after every earlier write
  const std::vector<std::int64_t> ids = resolve_filter(&filter);
  WriteResult r{upd_->submitted_seq, 0};
  if (!ids.empty()) {
    try {
      r = submit_remove(ids.data(), static_cast<std::int64_t>(ids.size()));
    } catch (const std::exception& e) {
      reject_write(e.what());
      throw;
    }
  }
  if (pending_writes() > 0) apply_writes();
  else broadcast_and_apply(&upd_->pending);
  return r;
}

// Followers: one update step. Returns false when the loop must end.
bool UpdateCoordinator::follow_step(const StepHeader& h, bool lock_step) {
  switch (static_cast<IndexOp>(h.op)) {
    case IndexOp::kWrite: {
      SHARDTOPK_ASSERT(upd_, "write step on a read-only index");
      broadcast_bytes(*host_comm_, upd_->group_bytes, 0);
      receive_and_apply(upd_->group_bytes);  // CommError on failure: the job ends
      return true;
    }
    case IndexOp::kSnapshot:
    case IndexOp::kSnapshotBlock:
    case IndexOp::kResolve: {
      SHARDTOPK_ASSERT(upd_, "update step on a read-only index");
      const auto op = static_cast<IndexOp>(h.op);
      if (op == IndexOp::kSnapshot && h.k == 1) return true;  // nothing new
      try {
        if (op == IndexOp::kSnapshot) begin_snapshot_run();
        else if (op == IndexOp::kSnapshotBlock) snapshot_block_step(h.k == 1, h.batch);
        else resolve_filter(nullptr);
      } catch (const RemoteError& e) {
        if (lock_step) throw;
        spdlog::warn("rank {}: {} failed: {}", rank(), op == IndexOp::kResolve ? "delete by filter" : "snapshot",
                     e.what());
      }
      return true;
    }
    case IndexOp::kReplayDone:
      SHARDTOPK_ASSERT(upd_, "replay step on a read-only index");
      upd_->replay_done = true;
      release_group_buffers();
      return true;
    default:
      break;
  }
  throw CommError("rank " + std::to_string(rank()) + ": unknown index op " + std::to_string(h.op) + " from rank 0");
}

}  // namespace shardtopk
