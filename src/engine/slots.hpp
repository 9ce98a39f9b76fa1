#pragma once
// The host-side bookkeeping both engines keep for their slots (Engine::write_rows / set_live /
// read_rows): which slots are live, how many dead ones a search scans, the checks of each slot
// call, and the ids and attribute table over every slot. Each engine keeps the rows, and a copy
// of the live mask, in its own memory space.

#include <cstdint>
#include <string>
#include <vector>

#include "shardtopk/engine.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk::engine_detail {

/// [capacity] global ids of every slot: the shard's (ShardInput::ids, or first_row + r) for
/// its rows, kPadId for the reserved slots.
std::vector<std::int64_t> slot_ids(const ShardInput& shard, std::int64_t capacity);

/// The attribute table over every slot: the shard's columns (zeros in the reserved slots) and
/// slot_ids(); no columns when the shard has none. Block summaries on `threads` threads (0: all).
/// @throws Error naming `engine` when the shard's attribute table has another row count.
AttributeTable slot_attribute_table(const ShardInput& shard, std::int64_t capacity, int threads, const char* engine);

/// The check every streamed-load call `what` of `engine` ("CPU engine", "CUDA engine") makes: a
/// load under way (`streaming`), in the shard's format (ShardInput::stream_format).
/// @throws Error naming the call and, for the other format, the calls that take the shard's.
void check_stream_call(bool streaming, RowFormat shard_format, RowFormat call_format, const char* engine,
                       const char* what);

/// The refusal of a streamed binary16 pattern that is not a finite value (every exponent bit
/// set: Engine::load_rows_bits), naming the row's global id, the value (±inf, nan) and the
/// column: the one wording of both engines.
std::string nonfinite_bits_message(std::int64_t id, float value, std::int64_t col);

/// Words [lo, hi] of the live mask that a set_live() changed; empty when hi < lo.
struct WordSpan {
  std::int64_t lo = 0, hi = -1;
  bool empty() const { return hi < lo; }
};

/// The live mask of an engine's slots and the count of dead slots its searches scan.
class Slots {
 public:
  Slots() = default;
  /// `capacity` slots, [0, rows) live and the rest dead; searches scan [0, scanned)
  /// (rows ≤ scanned ≤ capacity).
  Slots(std::int64_t capacity, std::int64_t rows, std::int64_t scanned);

  std::int64_t capacity() const { return capacity_; }
  /// Slots [0, scanned()) are what a search reads.
  std::int64_t scanned() const { return scanned_; }
  /// Dead slots below scanned(): while > 0, every search reads the live mask.
  std::int64_t dead() const { return dead_; }
  bool is_live(std::int64_t slot) const { return ((live_[slot >> 5] >> (slot & 31)) & 1u) != 0u; }
  /// [filter_mask_words(capacity)]: bit (s % 32) of word s / 32 set when slot s is live.
  const std::vector<std::uint32_t>& live_mask() const { return live_; }

  /// Grows scanned() to slot + 1 (the never-used slots it takes in are dead).
  void scan_through(std::int64_t slot);

  /// @throws Error naming `what` and the slot for a slot outside [0, capacity).
  void check(const std::int64_t* slots, std::int64_t n, const char* what) const;
  /// write_rows' checks, made before anything changes (nothing to check when w.n ≤ 0).
  /// @throws Error for a null buffer, a slot out of range or live, or a vector [dim] with a
  ///   value that overflows `dtype` (naming the row's id, the value and the column).
  void check_write(const SlotRows& w, std::int64_t dim, Dtype dtype) const;
  /// read_rows' checks. @throws Error for null buffers or a slot out of range.
  void check_read(const std::int64_t* slots, std::int64_t n, const float* out) const;
  /// Marks slots [n] live or dead, after checking them all (nothing changes on error).
  /// @returns the words of live_mask() that changed. @throws Error for null slots or a slot out
  ///   of range.
  WordSpan set_live(const std::int64_t* slots, std::int64_t n, bool live);

 private:
  std::int64_t capacity_ = 0, scanned_ = 0, dead_ = 0;
  std::vector<std::uint32_t> live_;
};

}  // namespace shardtopk::engine_detail
