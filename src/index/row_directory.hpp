#pragma once
// Rank 0's directory of the live rows of an updatable index: which rank and slot holds each
// global id, and which slots are free. It decides where new rows go (the placement rule of
// docs/STORAGE.md "Updates"), deterministically from the state it has, so that a replay of the
// log from the same base places every row where it went the first time. Internal header.
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <unordered_map>
#include <vector>

namespace shardtopk {

/// A row's place: rank and slot in that rank's engine.
struct SlotRef {
  std::int32_t rank = 0;
  std::int64_t slot = 0;
};

class RowDirectory {
 public:
  /// `base_rows[r]`: rows rank r was built with (slots [0, base_rows[r]), all live);
  /// `capacity[r]`: its slots. `base_ids`: the base rows' global ids in rank order (rank 0's
  /// rows, then rank 1's, ...), or empty when every base row's id is its global row position.
  /// @throws Error naming an id that appears twice among the base rows.
  RowDirectory(std::vector<std::int64_t> base_rows, std::vector<std::int64_t> capacity,
               const std::vector<std::int64_t>& base_ids);

  /// Where `id` lives, or nothing when it is not a live row.
  std::optional<SlotRef> find(std::int64_t id) const;

  /// Removes live row `id` and frees its slot (the caller has checked that it is live).
  SlotRef erase(std::int64_t id);

  /// Places a new live row `id` (not live now) by the placement rule: the rank with the most
  /// free slots (ties: the lowest rank), in its lowest free slot. The caller has checked that
  /// free_slots() > 0.
  SlotRef place(std::int64_t id);

  std::int64_t free_slots() const { return free_total_; }
  std::int64_t live_rows() const { return live_; }
  std::int64_t capacity_rows() const { return capacity_total_; }
  /// Slots freed by deletes and not yet reused (dead slots the engines still scan).
  std::int64_t tombstones() const;
  int ranks() const { return static_cast<int>(capacity_.size()); }

 private:
  static constexpr std::int64_t kDeleted = -1;  // override of a base id that is not live
  static std::int64_t pack(SlotRef p) { return (static_cast<std::int64_t>(p.rank) << 48) | p.slot; }
  static SlotRef unpack(std::int64_t v) { return SlotRef{static_cast<std::int32_t>(v >> 48), v & ((1LL << 48) - 1)}; }
  std::optional<SlotRef> base_place(std::int64_t id) const;

  std::vector<std::int64_t> base_rows_, capacity_, base_lo_;  // base_lo_[r]: first global row of rank r
  std::vector<std::pair<std::int64_t, std::int64_t>> base_sorted_;  // (id, global row); empty: implicit ids
  std::int64_t base_total_ = 0;
  std::unordered_map<std::int64_t, std::int64_t> overrides_;  // id -> packed place, or kDeleted
  std::vector<std::int64_t> used_;   // live slots per rank
  std::vector<std::int64_t> next_;   // per rank: slots [next_, capacity) were never used
  std::vector<std::priority_queue<std::int64_t, std::vector<std::int64_t>, std::greater<std::int64_t>>> freed_;
  std::int64_t free_total_ = 0, live_ = 0, capacity_total_ = 0;
};

}  // namespace shardtopk
