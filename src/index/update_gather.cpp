// The update coordinator's steps that gather every rank's live rows to rank 0: snapshots (the
// rows themselves, written by rank 0) and deletes by filter (the ids of the rows that pass).
#include <algorithm>
#include <cstring>
#include <optional>

#include "core/log.hpp"
#include "index/update_coordinator.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk {
namespace {

constexpr std::int64_t kSnapshotBlockRows = 4096;  // rows per snapshot block

}  // namespace

SnapshotResult UpdateCoordinator::snapshot() {
  if (rank() != 0) {
    protocol_.follow_one(/*lock_step=*/true);
    return {};
  }
  if (!upd_) {
    reject_write("read-only");
    throw WriteError(WriteError::Kind::kReadOnly, "the index is read-only: storage.dir is not set (snapshots are "
                                                  "written there)");
  }
  apply_writes();
  Updates& u = *upd_;
  // Nothing new since the current snapshot: that one (a step all the same, for lock step).
  const bool current = !u.storage->snapshot_path().empty() && u.storage->snapshot_seq() == u.applied_seq;
  StepHeader h;
  h.op = static_cast<std::int32_t>(IndexOp::kSnapshot);
  h.k = current ? 1 : 0;
  host_comm_->broadcast(&h, sizeof h, 0);
  if (current) return SnapshotResult{u.storage->snapshot_path(), u.applied_seq, u.dir->live_rows()};
  return write_snapshot();
}

std::optional<SnapshotResult> UpdateCoordinator::snapshot_if_log_exceeds() {
  const std::int64_t limit = cfg_.storage.snapshot_log_bytes;     // the same on every rank
  const double interval = cfg_.storage.snapshot_interval_s;       // likewise
  if (!upd_ || (limit <= 0 && interval <= 0)) return std::nullopt;
  if (rank() != 0) {
    try {
      protocol_.follow_one(/*lock_step=*/true);
    } catch (const CommError&) {
      throw;
    } catch (const std::exception& e) {  // rank 0 logs the failure and goes on: so do the others
      spdlog::warn("rank {}: automatic snapshot failed: {}", rank(), e.what());
    }
    return std::nullopt;
  }
  Updates& u = *upd_;
  const StorageStats st = u.storage->stats();
  const std::int64_t bytes = st.log_bytes;
  // By size: the log holds more than snapshot_log_bytes. By age: records after a snapshot (or
  // after the start, without one) older than snapshot_interval_s.
  const bool by_size = limit > 0 && bytes > limit && bytes > u.auto_snapshot_after_bytes;
  const bool by_age = interval > 0 && st.records_since_snapshot > 0 && st.seconds_since_snapshot >= interval &&
                      st.seconds_since_snapshot >= u.auto_snapshot_after_s;
  if (!by_size && !by_age) {
    StepHeader h;  // a step that does nothing: "no new snapshot"
    h.op = static_cast<std::int32_t>(IndexOp::kSnapshot);
    h.k = 1;
    host_comm_->broadcast(&h, sizeof h, 0);
    return std::nullopt;
  }
  const std::string why = by_size ? fmt::format("the log held {} bytes (storage.snapshot_log_bytes {})", bytes, limit)
                                  : fmt::format("the snapshot was {:.0f} s old (storage.snapshot_interval_s {})",
                                                st.seconds_since_snapshot, interval);
  try {
    const SnapshotResult r = snapshot();
    u.auto_snapshot_after_bytes = 0;
    u.auto_snapshot_after_s = 0;
    spdlog::info("updates: {}: snapshot {} at seq {} ({} rows)", why, r.path, r.seq, r.rows);
    return r;
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    if (by_size) u.auto_snapshot_after_bytes = bytes + limit;
    if (by_age) u.auto_snapshot_after_s = st.seconds_since_snapshot + interval;
    spdlog::warn("updates: automatic snapshot ({}) failed: {}; the log keeps every record, next try {}", why, e.what(),
                 by_size ? fmt::format("past {} bytes", u.auto_snapshot_after_bytes)
                         : fmt::format("in {:.0f} s", interval));
    return std::nullopt;
  }
}

// Every rank: its live slots' rows to rank 0, one block at a time in rank order; rank 0 writes
// them. A rank's failure is reported to every rank at the end (the protocol's steps are known to
// all from the counts, so a failure never leaves ranks out of step).
SnapshotResult UpdateCoordinator::write_snapshot() {
  Updates& u = *upd_;
  const int world = world_size();
  const std::int64_t dim = stats_.dim, ncols = static_cast<std::int64_t>(schema_.size());
  std::vector<std::int64_t> slots;
  for (std::size_t s = 0; s < u.live.size(); ++s)
    if (u.live[s]) slots.push_back(static_cast<std::int64_t>(s));
  const std::int64_t mine = static_cast<std::int64_t>(slots.size());
  std::vector<std::int64_t> counts(static_cast<std::size_t>(world));
  host_comm_->allgather(&mine, counts.data(), sizeof mine);
  std::int64_t total = 0;
  for (auto c : counts) total += c;

  bool ok = true;
  std::string msg;
  std::unique_ptr<SnapshotWriter> writer;
  SnapshotResult result;
  if (rank() == 0) {
    result.seq = u.applied_seq;
    result.rows = total;
    try {
      SnapshotSpec spec;
      spec.seq = u.applied_seq;
      spec.rows = total;
      spec.dtype = engine_->info().dtype == Dtype::kFloat16 ? Dtype::kFloat16 : Dtype::kFloat32;
      for (const auto& a : schema_) spec.attributes.emplace_back(a.name, a.type);
      spec.normalized = metric_ == Metric::kCosine;
      writer = u.storage->begin_snapshot(spec);
    } catch (const std::exception& e) {
      ok = false;
      msg = e.what();
    }
  }
  std::vector<std::uint8_t> block;
  std::vector<float> vecs;
  std::vector<std::vector<std::uint64_t>> cols(static_cast<std::size_t>(ncols));
  const AttributeTable& table = engine_->attribute_table();
  for (int r = 0; r < world; ++r) {
    for (std::int64_t b0 = 0; b0 < counts[static_cast<std::size_t>(r)]; b0 += kSnapshotBlockRows) {
      const std::int64_t m = std::min(kSnapshotBlockRows, counts[static_cast<std::size_t>(r)] - b0);
      // [m] ids, [m, dim] float32 (padded to 8 bytes), [ncols, m] attribute value bits
      const std::int64_t vec_bytes = (4 * m * dim + 7) / 8 * 8;
      block.assign(static_cast<std::size_t>(8 * m + vec_bytes + 8 * ncols * m), 0);
      auto* ids = reinterpret_cast<std::int64_t*>(block.data());
      auto* v = reinterpret_cast<float*>(block.data() + 8 * m);
      auto* c0 = reinterpret_cast<std::uint64_t*>(block.data() + 8 * m + vec_bytes);
      if (r == rank() && ok) {
        try {
          engine_->read_rows(slots.data() + b0, m, v);
          for (std::int64_t i = 0; i < m; ++i) {
            const auto s = static_cast<std::size_t>(slots[static_cast<std::size_t>(b0 + i)]);
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
      host_comm_->broadcast(block.data(), block.size(), r);
      if (rank() == 0 && ok && writer) {
        try {
          vecs.assign(v, v + m * dim);
          std::vector<AttributeColumnView> views;
          for (std::int64_t c = 0; c < ncols; ++c) {
            cols[static_cast<std::size_t>(c)].assign(c0 + c * m, c0 + (c + 1) * m);
            views.push_back(AttributeColumnView{schema_[static_cast<std::size_t>(c)].name,
                                                schema_[static_cast<std::size_t>(c)].type,
                                                cols[static_cast<std::size_t>(c)].data()});
          }
          std::vector<std::int64_t> idv(ids, ids + m);
          writer->write(m, idv.data(), vecs.data(), views);
        } catch (const std::exception& e) {
          ok = false;
          msg = e.what();
        }
      }
    }
  }
  if (rank() == 0 && ok && writer) {
    try {
      result.path = writer->commit();
    } catch (const std::exception& e) {
      ok = false;
      msg = e.what();
    }
  }
  writer.reset();  // not committed: the directory is left as it was
  host_comm_->check(ok, msg);
  return result;
}

// Every rank: the ids of its live rows that pass the filter, gathered on rank 0 (sorted).
std::vector<std::int64_t> UpdateCoordinator::resolve_filter(const FilterProgram* filter) {
  Updates& u = *upd_;
  std::vector<std::uint8_t> program;
  if (rank() == 0) {
    program = filter->serialize();
    StepHeader h;
    h.op = static_cast<std::int32_t>(IndexOp::kResolve);
    host_comm_->broadcast(&h, sizeof h, 0);
  }
  broadcast_bytes(*host_comm_, program, 0);
  std::vector<std::int64_t> mine;
  bool ok = true;
  std::string msg;
  try {
    // Rank 0 keeps the program it was given; the other ranks rebuild it from the bytes.
    std::optional<FilterProgram> rebuilt;
    if (!filter) rebuilt = deserialize_filter(program.data(), program.size(), schema_);
    const FilterProgram& f = filter ? *filter : *rebuilt;
    const AttributeTable& table = engine_->attribute_table();
    const std::int64_t slots = static_cast<std::int64_t>(u.live.size());
    std::vector<std::uint32_t> bits(static_cast<std::size_t>(filter_mask_words(slots)), 0u);
    if (slots > 0) evaluate_mask(f, table, RowRange{0, slots}, bits.data(), nullptr, 1);
    for (std::int64_t s = 0; s < slots; ++s)
      if (u.live[static_cast<std::size_t>(s)] && ((bits[static_cast<std::size_t>(s >> 5)] >> (s & 31)) & 1u))
        mine.push_back(table.global_ids()[static_cast<std::size_t>(s)]);
  } catch (const std::exception& e) {
    ok = false;
    msg = e.what();
    mine.clear();
  }
  host_comm_->check(ok, msg);
  const int world = world_size();
  const std::int64_t n = static_cast<std::int64_t>(mine.size());
  std::vector<std::int64_t> counts(static_cast<std::size_t>(world));
  host_comm_->allgather(&n, counts.data(), sizeof n);
  std::vector<std::int64_t> all;
  for (int r = 0; r < world; ++r) {
    std::vector<std::uint8_t> buf;
    if (r == rank()) {
      buf.resize(mine.size() * 8);
      std::memcpy(buf.data(), mine.data(), buf.size());
    }
    if (counts[static_cast<std::size_t>(r)] == 0) continue;
    broadcast_bytes(*host_comm_, buf, r);
    if (rank() == 0) {
      const auto* p = reinterpret_cast<const std::int64_t*>(buf.data());
      all.insert(all.end(), p, p + counts[static_cast<std::size_t>(r)]);
    }
  }
  std::sort(all.begin(), all.end());
  return all;
}

}  // namespace shardtopk
