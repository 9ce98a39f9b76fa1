#include "engine/slots.hpp"

#include <algorithm>
#include <utility>

#include "core/half.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk {

Engine::LoadedNorms Engine::loaded_norms() const {
  throw Error("loaded_norms: this engine does not measure a streamed load's row norms (measures_loaded_norms)");
}

}  // namespace shardtopk

namespace shardtopk::engine_detail {

std::vector<std::int64_t> slot_ids(const ShardInput& s, std::int64_t capacity) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(capacity), kPadId);
  for (std::int64_t r = 0; r < s.rows; ++r) ids[static_cast<std::size_t>(r)] = s.ids ? s.ids[r] : s.first_row + r;
  return ids;
}

void check_stream_call(bool streaming, RowFormat shard_format, RowFormat call_format, const char* engine,
                       const char* what) {
  SHARDTOPK_EXPECTS(streaming, what, ": this ", engine, " was not built with ShardInput::streamed, or its load has "
                    "finished");
  const bool bits = shard_format == RowFormat::kFloat16Bits;
  SHARDTOPK_EXPECTS(call_format == shard_format, what, ": this ", engine, " streams ",
                    bits ? "float16 bits" : "float32 rows", " (ShardInput::stream_format); use ",
                    bits ? "load_buffer_bits / load_rows_bits" : "load_buffer / load_rows");
}

std::string nonfinite_bits_message(std::int64_t id, float value, std::int64_t col) {
  return detail::concat("corpus row ", id, " value ", value, " at column ", col,
                        " is not finite (a float16 pattern with every exponent bit set); the corpus must hold finite "
                        "values");
}

AttributeTable slot_attribute_table(const ShardInput& s, std::int64_t capacity, int threads, const char* engine) {
  std::vector<AttributeColumn> cols;
  if (s.attributes) {
    SHARDTOPK_EXPECTS(s.attributes->rows() == s.rows, engine, ": the attribute table has ", s.attributes->rows(),
                      " rows but the shard has ", s.rows);
    for (int c = 0; c < s.attributes->columns(); ++c) {
      cols.push_back(s.attributes->column(c));
      if (cols.back().type == AttributeType::kInt64) cols.back().ints.resize(static_cast<std::size_t>(capacity), 0);
      else cols.back().reals.resize(static_cast<std::size_t>(capacity), 0.0);
    }
  }
  return AttributeTable(std::move(cols), slot_ids(s, capacity), threads);
}

Slots::Slots(std::int64_t capacity, std::int64_t rows, std::int64_t scanned)
    : capacity_(capacity), scanned_(scanned), dead_(scanned - rows),
      live_(static_cast<std::size_t>(filter_mask_words(capacity)), 0u) {
  SHARDTOPK_ASSERT(0 <= rows && rows <= scanned && scanned <= capacity);
  for (std::int64_t r = 0; r < rows; ++r) live_[r >> 5] |= 1u << (r & 31);
}

void Slots::scan_through(std::int64_t slot) {
  for (; scanned_ <= slot; ++scanned_) dead_ += is_live(scanned_) ? 0 : 1;
}

void Slots::check(const std::int64_t* slots, std::int64_t n, const char* what) const {
  for (std::int64_t i = 0; i < n; ++i)
    SHARDTOPK_EXPECTS(slots[i] >= 0 && slots[i] < capacity_, what, ": slot ", slots[i], " outside [0, ", capacity_, ")");
}

void Slots::check_write(const SlotRows& w, std::int64_t dim, Dtype dtype) const {
  if (w.n <= 0) return;
  SHARDTOPK_EXPECTS(w.slots && w.ids && w.vectors, "write_rows: null slots, ids or vectors");
  check(w.slots, w.n, "write_rows");
  for (std::int64_t i = 0; i < w.n; ++i)
    SHARDTOPK_EXPECTS(!is_live(w.slots[i]), "write_rows: slot ", w.slots[i], " is live (delete it first)");
  if (dtype == Dtype::kFloat32) return;
  for (std::int64_t i = 0; i < w.n; ++i) {
    const std::int64_t d = half::first_overflow(w.vectors + i * dim, dim, dtype == Dtype::kBFloat16);
    SHARDTOPK_EXPECTS(d < 0, "row id ", w.ids[i], " value ", w.vectors[i * dim + (d < 0 ? 0 : d)], " at column ", d,
                      " overflows ", to_string(dtype), "; use engine.dtype float32");
  }
}

void Slots::check_read(const std::int64_t* slots, std::int64_t n, const float* out) const {
  if (n <= 0) return;
  SHARDTOPK_EXPECTS(slots != nullptr && out != nullptr, "read_rows: null slots or output");
  check(slots, n, "read_rows");
}

WordSpan Slots::set_live(const std::int64_t* slots, std::int64_t n, bool live) {
  WordSpan changed;
  if (n <= 0) return changed;
  SHARDTOPK_EXPECTS(slots != nullptr, "set_live: null slots");
  check(slots, n, "set_live");
  changed.lo = static_cast<std::int64_t>(live_.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = slots[i];
    if (is_live(r) == live) continue;
    if (live) live_[r >> 5] |= 1u << (r & 31);
    else live_[r >> 5] &= ~(1u << (r & 31));
    if (r < scanned_) dead_ += live ? -1 : 1;
    changed.lo = std::min(changed.lo, r >> 5);
    changed.hi = std::max(changed.hi, r >> 5);
  }
  return changed;
}

}  // namespace shardtopk::engine_detail
