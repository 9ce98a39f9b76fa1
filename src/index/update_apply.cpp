// Applying logged writes on every rank (docs/STORAGE.md "Updates"): a group of planned writes is
// merged into one op (merge_write_ops), broadcast once, and applied by each rank as one mask
// update and one engine write of its rows; and the start-up replay, which plans the log's records
// in large groups so that a long log is applied at memory speed, reporting its progress.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "core/log.hpp"
#include "index/admission.hpp"
#include "index/update_coordinator.hpp"

namespace shardtopk {
namespace {

/// Seconds between two progress lines of a long replay.
constexpr double kProgressEverySeconds = 2.0;

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

void UpdateCoordinator::broadcast_and_apply(std::vector<WriteOp>* ops, ApplySeconds* seconds) {
  const std::int64_t dim = stats_.dim;
  auto t = Clock::now();
  auto lap = [&](double ApplySeconds::*stage) {
    const auto now = Clock::now();
    if (seconds) seconds->*stage += std::chrono::duration<double>(now - t).count();
    t = now;
  };
  std::vector<WriteOp>& group = upd_->group;  // the pending ops as one (none: an empty step keeps lock step)
  group.resize(ops->empty() ? 0 : 1);
  if (!ops->empty()) merge_write_ops(std::move(*ops), dim, schema_.size(), &group.front());
  if (upd_->recycle)
    for (WriteOp& op : *ops) upd_->spare.push_back(std::move(op));
  ops->clear();
  upd_->pending_bytes = 0;
  lap(&ApplySeconds::merge);
  StepHeader h;
  h.op = static_cast<std::int32_t>(IndexOp::kWrite);
  host_comm_->broadcast(&h, sizeof h, 0);
  if (world_size() > 1) {  // one rank applies the op it holds: nothing to encode
    encode_write_ops(group, dim, &upd_->group_bytes);
    broadcast_bytes(*host_comm_, upd_->group_bytes, 0);
  }
  lap(&ApplySeconds::send);
  apply_ops(group);  // rank 0 applies the op it planned
  upd_->live_rows = upd_->dir->live_rows();
  upd_->tombstones = upd_->dir->tombstones();
  publish_norm_bound();
  lap(&ApplySeconds::apply);
}

WriteOp UpdateCoordinator::take_op() {
  if (!upd_->recycle || upd_->spare.empty()) return WriteOp{};
  WriteOp op = std::move(upd_->spare.back());
  upd_->spare.pop_back();
  op.reset(schema_.size());
  return op;
}

void UpdateCoordinator::release_group_buffers() {
  std::vector<WriteOp>().swap(upd_->group);
  std::vector<std::uint8_t>().swap(upd_->group_bytes);
  std::vector<WriteOp>().swap(upd_->spare);
  upd_->recycle = false;
}

void UpdateCoordinator::receive_and_apply(const std::vector<std::uint8_t>& bytes) {
  std::vector<WriteOp>& ops = upd_->group;
  bool ok = true;
  std::string msg;
  try {
    decode_write_ops(bytes.data(), bytes.size(), stats_.dim, static_cast<int>(schema_.size()), &ops);
  } catch (const std::exception& e) {
    ok = false;
    msg = e.what();
    ops.clear();
  }
  apply_ops(ops, ok ? "" : msg);
}

// The bound the writes left (apply_ops) is the one the next batches are admitted against.
void UpdateCoordinator::publish_norm_bound() {
  if (admission_) admission_->set_norm_bound(stats_.max_row_norm, stats_.max_row_norm_row);
}

// Every rank: its part of each op (kills, then rows), then a status check. A rank that fails
// here holds a state the others do not: the job ends (CommError), and a restart replays the log.
void UpdateCoordinator::apply_ops(const std::vector<WriteOp>& ops, const std::string& failed) {
  Updates& u = *upd_;
  bool ok = failed.empty();
  std::string msg = failed;
  std::uint64_t last = 0;
  double max_norm = stats_.max_row_norm;
  std::int64_t max_norm_id = stats_.max_row_norm_row;
  // The admission bound is the largest live row's norm: once the row that holds it dies, every
  // rank measures its live rows again (rare: only that row's death costs a pass).
  const bool ranged = metric_ != Metric::kCosine;
  std::uint8_t holder_died = 0;
  const int me = rank();
  if (ok) try {
      const auto& gids = engine_->attribute_table().global_ids();
      const std::int64_t dim = stats_.dim;
      std::vector<std::int64_t> slots, ids;
      std::vector<float> vectors;
      std::vector<std::vector<std::uint64_t>> cols(schema_.size());
      std::vector<const void*> colp(schema_.size());
      for (const WriteOp& op : ops) {
        slots.clear();
        for (const SlotRef& k : op.kills)
          if (k.rank == me) {
            slots.push_back(k.slot);
            if (ranged && gids[static_cast<std::size_t>(k.slot)] == max_norm_id) holder_died = 1;
          }
        engine_->set_live(slots.data(), static_cast<std::int64_t>(slots.size()), false);
        for (auto s : slots) u.live[static_cast<std::size_t>(s)] = 0;
        // This rank's rows: one contiguous range of a merged op, used in place (its vectors are
        // copied only to be normalised); rows of several ranks interleaved are gathered first.
        const auto first = std::find_if(op.places.begin(), op.places.end(), [&](const SlotRef& p) { return p.rank == me; });
        const std::size_t a = static_cast<std::size_t>(first - op.places.begin());
        std::size_t b = a;
        while (b < op.places.size() && op.places[b].rank == me) ++b;
        const bool contiguous =
            std::none_of(op.places.begin() + static_cast<std::ptrdiff_t>(b), op.places.end(),
                         [&](const SlotRef& p) { return p.rank == me; });
        slots.clear();
        SlotRows w;
        if (contiguous) {
          for (std::size_t i = a; i < b; ++i) slots.push_back(op.places[i].slot);
          w.ids = op.ids.data() + a;
          w.vectors = op.vectors.data() + a * static_cast<std::size_t>(dim);
          for (std::size_t c = 0; c < cols.size(); ++c) colp[c] = op.columns[c].data() + a;
        } else {
          ids.clear();
          vectors.clear();
          for (auto& c : cols) c.clear();
          for (std::size_t i = 0; i < op.places.size(); ++i) {
            if (op.places[i].rank != me) continue;
            slots.push_back(op.places[i].slot);
            ids.push_back(op.ids[i]);
            vectors.insert(vectors.end(), op.vectors.begin() + static_cast<std::ptrdiff_t>(i * dim),
                           op.vectors.begin() + static_cast<std::ptrdiff_t>((i + 1) * dim));
            for (std::size_t c = 0; c < cols.size(); ++c) cols[c].push_back(op.columns[c][i]);
          }
          w.ids = ids.data();
          w.vectors = vectors.data();
          for (std::size_t c = 0; c < cols.size(); ++c) colp[c] = cols[c].data();
        }
        if (!slots.empty()) {
          const std::int64_t m = static_cast<std::int64_t>(slots.size());
          if (metric_ == Metric::kCosine) {
            if (w.vectors != vectors.data()) vectors.assign(w.vectors, w.vectors + m * dim);
            normalize_rows(vectors.data(), m, dim, 0, "upserted row");
            w.vectors = vectors.data();
          }
          w.n = m;
          w.slots = slots.data();
          w.attributes = colp.empty() ? nullptr : colp.data();
          preserve_for_snapshot(slots);  // the rows a running snapshot has not sent yet
          engine_->write_rows(w);
          engine_->set_live(slots.data(), m, true);
          for (auto s : slots) u.live[static_cast<std::size_t>(s)] = 1;
        }
        if (op.rows() > 0 && op.max_norm > max_norm) {
          max_norm = op.max_norm;
          max_norm_id = op.max_norm_id;
        }
        last = op.seq;
      }
    } catch (const std::exception& e) {
      ok = false;
      msg = e.what();
    }
  if (!ok) spdlog::error("rank {}: applying logged writes failed: {}", me, msg);
  try {
    host_comm_->check(ok, msg);
  } catch (const RemoteError& e) {
    throw CommError(std::string("applying logged writes failed (the ranks' rows now differ; a restart replays the "
                                "log): ") + e.what());
  }
  if (last > 0) u.applied_seq = last;
  stats_.max_row_norm = max_norm;
  stats_.max_row_norm_row = max_norm_id;
  if (!ranged) return;
  std::vector<std::uint8_t> died(static_cast<std::size_t>(world_size()));
  host_comm_->allgather(&holder_died, died.data(), 1);
  if (std::find(died.begin(), died.end(), 1) == died.end()) return;
  if (const std::optional<NormSummary> live = live_row_norms(*engine_, *host_comm_, u.live, stats_.dim)) {
    if (me == 0)
      spdlog::debug("score range: the largest row norm {:.6g} (id {}) left; now {:.6g} (id {})", max_norm,
                    max_norm_id, live->max_norm, live->row);
    stats_.max_row_norm = live->max_norm;
    stats_.max_row_norm_row = live->row;
  }
}

void UpdateCoordinator::replay_log(std::uint64_t base_seq) {
  Updates& u = *upd_;
  const std::uint64_t last_seq = u.storage->last_seq();
  const std::uint64_t total = last_seq > base_seq ? last_seq - base_seq : 0;
  const auto t0 = Clock::now();
  auto last_line = t0;
  std::uint64_t done = 0;
  // Where the time goes, for the summary line: planning the records (rank 0), then per step
  // merging them, sending the merged op to the other ranks, and applying it on every rank; the
  // rest is reading and checking the log.
  double plan_s = 0;
  ApplySeconds steps;
  u.recycle = true;
  // Planned bytes per step: the records of a step are merged and applied as one write.
  const std::size_t step_bytes = static_cast<std::size_t>(cfg_.storage.replay_step_bytes);
  u.storage->replay(base_seq, [&](const WalRecord& rec) {
    const auto tp = Clock::now();
    try {
      if (rec.type == WalRecordType::kUpsert) {
        UpsertRows rows;
        rows.rows = rec.rows;
        rows.ids = rec.ids;
        rows.vectors = rec.vectors;
        rows.attributes = rec.attributes;
        plan_and_submit_upsert(rows, /*replay=*/true, rec.seq);
      } else {
        plan_and_submit_remove(rec.ids, rec.rows, /*replay=*/true, rec.seq);
      }
    } catch (const Error& e) {
      throw Error(detail::concat("storage '", u.storage->options().dir, "': log record seq ", rec.seq,
                                 " cannot be applied to this index: ", e.what()));
    }
    plan_s += seconds_since(tp);
    ++done;
    if (u.pending_bytes >= step_bytes) broadcast_and_apply(&u.pending, &steps);
    if (seconds_since(last_line) >= kProgressEverySeconds) {
      last_line = Clock::now();
      const double s = seconds_since(t0), rate = static_cast<double>(done) / s;
      spdlog::info("replaying the log: {}/{} records ({:.0f}%), {:.1f} s, {:.0f} records/s, ETA {:.0f} s", done, total,
                   100.0 * static_cast<double>(done) / static_cast<double>(std::max<std::uint64_t>(total, 1)), s, rate,
                   static_cast<double>(total - std::min(done, total)) / std::max(rate, 1e-9));
    }
  });
  if (!u.pending.empty()) broadcast_and_apply(&u.pending, &steps);
  release_group_buffers();
  // Records that planned nothing (deletes of ids no longer live) are applied all the same.
  u.applied_seq = std::max(u.applied_seq.load(), last_seq);
  u.submitted_seq = u.applied_seq;
  if (done > 0) {
    const double s = seconds_since(t0), n = static_cast<double>(done);
    const double read_s = std::max(0.0, s - plan_s - steps.merge - steps.send - steps.apply);
    auto us = [&](double x) { return x / n * 1e6; };
    spdlog::info("replayed {} log record(s) in {:.2f} s ({:.0f} records/s); per record: reading {:.2f} us, planning "
                 "{:.2f} us, merging {:.2f} us, sending {:.2f} us, applying {:.2f} us ({:.2f} / {:.2f} / {:.2f} / "
                 "{:.2f} / {:.2f} s)",
                 done, s, n / std::max(s, 1e-9), us(read_s), us(plan_s), us(steps.merge), us(steps.send),
                 us(steps.apply), read_s, plan_s, steps.merge, steps.send, steps.apply);
  }
}

}  // namespace shardtopk
