// AttributeTable: a shard's attribute columns, its global ids and their per-block bounds.
#include <algorithm>
#include <cmath>
#include <set>

#include "core/parallel.hpp"
#include "filter/filter_internal.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk {
namespace {

// Blocks per thread below which a thread costs more than it saves (a block is 1024 values).
constexpr std::int64_t kMinBlocksPerThread = 64;

template <class T>
void block_bounds(const T* v, std::int64_t rows, std::vector<T>* mn, std::vector<T>* mx, int threads) {
  const std::int64_t blocks = (rows + kFilterBlockRows - 1) / kFilterBlockRows;
  mn->assign(static_cast<std::size_t>(blocks), T{});
  mx->assign(static_cast<std::size_t>(blocks), T{});
  parallel_ranges(blocks, range_parts(blocks, threads, kMinBlocksPerThread), [&](std::int64_t b0, std::int64_t b1, int) {
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t r0 = b * kFilterBlockRows, r1 = std::min(rows, r0 + kFilterBlockRows);
      T lo = v[r0], hi = v[r0];
      for (std::int64_t r = r0 + 1; r < r1; ++r) {
        lo = v[r] < lo ? v[r] : lo;
        hi = v[r] > hi ? v[r] : hi;
      }
      (*mn)[static_cast<std::size_t>(b)] = lo;
      (*mx)[static_cast<std::size_t>(b)] = hi;
    }
  });
}

// The first NaN of a float64 column, or -1.
std::int64_t first_nan(const std::vector<double>& v, int threads) {
  const auto n = static_cast<std::int64_t>(v.size());
  const int parts = range_parts(n, threads, 1 << 16);
  std::vector<std::int64_t> found(static_cast<std::size_t>(parts), -1);
  parallel_ranges(n, parts, [&](std::int64_t lo, std::int64_t hi, int p) {
    for (std::int64_t i = lo; i < hi; ++i)
      if (std::isnan(v[static_cast<std::size_t>(i)])) {
        found[static_cast<std::size_t>(p)] = i;
        return;
      }
  });
  for (auto f : found)
    if (f >= 0) return f;
  return -1;
}


/// The one-entry hull of block bounds (min of the minima, max of the maxima per vector); empty
/// vectors stay empty.
template <class T>
void hull_of(const std::vector<T>& mn, const std::vector<T>& mx, std::vector<T>* hmn, std::vector<T>* hmx) {
  hmn->clear();
  hmx->clear();
  if (mn.empty()) return;
  hmn->push_back(*std::min_element(mn.begin(), mn.end()));
  hmx->push_back(*std::max_element(mx.begin(), mx.end()));
}

BlockBounds hull(const BlockBounds& b) {
  BlockBounds h;
  hull_of(b.ints_min, b.ints_max, &h.ints_min, &h.ints_max);
  hull_of(b.reals_min, b.reals_max, &h.reals_min, &h.reals_max);
  return h;
}

}  // namespace

AttributeTable::AttributeTable(std::vector<AttributeColumn> columns, std::vector<std::int64_t> global_ids, int threads) {
  const auto rows = static_cast<std::int64_t>(global_ids.size());
  SHARDTOPK_EXPECTS(columns.size() <= static_cast<std::size_t>(kFilterMaxAttributes), "attribute table: ",
                    columns.size(), " attribute columns, at most ", kFilterMaxAttributes, " are supported");
  std::set<std::string> names;
  for (const AttributeColumn& c : columns) {
    SHARDTOPK_EXPECTS(!c.name.empty(), "attribute table: an attribute column has an empty name");
    SHARDTOPK_EXPECTS(names.insert(c.name).second, "attribute table: two attribute columns are named ",
                      quote_for_message(c.name), " (names must be unique)");
    const bool is_int = c.type == AttributeType::kInt64;
    SHARDTOPK_EXPECTS(is_int ? c.reals.empty() : c.ints.empty(), "attribute table: column ", quote_for_message(c.name), " is ",
                      to_string(c.type), " but holds ", is_int ? "float64" : "int64", " values");
    SHARDTOPK_EXPECTS(c.rows() == rows, "attribute table: column ", quote_for_message(c.name), " has ", c.rows(),
                      " values, the shard has ", rows, " rows (global ids)");
    if (!is_int) {
      const std::int64_t bad = first_nan(c.reals, threads);
      SHARDTOPK_EXPECTS(bad < 0, "attribute table: column ", quote_for_message(c.name), " is NaN at shard row ", bad,
                        " (attributes must not be NaN)");
    }
  }
  std::vector<BlockBounds> bounds(columns.size());
  for (std::size_t i = 0; i < columns.size(); ++i) {
    const AttributeColumn& c = columns[i];
    if (c.type == AttributeType::kInt64)
      block_bounds(c.ints.data(), rows, &bounds[i].ints_min, &bounds[i].ints_max, threads);
    else
      block_bounds(c.reals.data(), rows, &bounds[i].reals_min, &bounds[i].reals_max, threads);
  }
  BlockBounds ids;
  block_bounds(global_ids.data(), rows, &ids.ints_min, &ids.ints_max, threads);

  for (const AttributeColumn& c : columns) schema_.push_back(AttributeSpec{c.name, c.type});
  columns_ = std::move(columns);
  global_ids_ = std::move(global_ids);
  column_bounds_ = std::move(bounds);
  id_bounds_ = std::move(ids);
  column_hulls_.resize(column_bounds_.size());
  for (std::size_t i = 0; i < column_bounds_.size(); ++i) column_hulls_[i] = hull(column_bounds_[i]);
  id_hull_ = hull(id_bounds_);
}

namespace {

template <class T>
void widen(std::vector<T>& mn, std::vector<T>& mx, std::int64_t block, T v) {
  const auto b = static_cast<std::size_t>(block);
  mn[b] = v < mn[b] ? v : mn[b];
  mx[b] = v > mx[b] ? v : mx[b];
}

/// Block bounds `bb` and its one-entry hull `h` widened to hold v at `block`.
template <class T>
void widen_both(std::vector<T>& mn, std::vector<T>& mx, std::vector<T>& hmn, std::vector<T>& hmx, std::int64_t block,
                T v) {
  widen(mn, mx, block, v);
  widen(hmn, hmx, 0, v);
}

}  // namespace

void AttributeTable::write_rows(const std::int64_t* slots, std::int64_t n, const std::int64_t* ids,
                                const void* const* values) {
  if (n <= 0) return;
  SHARDTOPK_EXPECTS(slots != nullptr && ids != nullptr && (columns_.empty() || values != nullptr),
                    "attribute table: write_rows without slots, ids or values");
  for (std::int64_t i = 0; i < n; ++i)
    SHARDTOPK_EXPECTS(slots[i] >= 0 && slots[i] < rows(), "attribute table: row ", slots[i], " outside [0, ", rows(),
                      ")");
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    SHARDTOPK_EXPECTS(values[c] != nullptr, "attribute table: no values for column ", quote_for_message(columns_[c].name));
    if (columns_[c].type != AttributeType::kFloat64) continue;
    const double* v = static_cast<const double*>(values[c]);
    for (std::int64_t i = 0; i < n; ++i)
      SHARDTOPK_EXPECTS(!std::isnan(v[i]), "attribute ", quote_for_message(columns_[c].name), " of id ", ids[i],
                        " is NaN (attributes must not be NaN)");
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = slots[i], b = r / kFilterBlockRows;
    global_ids_[static_cast<std::size_t>(r)] = ids[i];
    widen_both(id_bounds_.ints_min, id_bounds_.ints_max, id_hull_.ints_min, id_hull_.ints_max, b, ids[i]);
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      AttributeColumn& col = columns_[c];
      BlockBounds& bb = column_bounds_[c];
      BlockBounds& h = column_hulls_[c];
      if (col.type == AttributeType::kInt64) {
        const std::int64_t v = static_cast<const std::int64_t*>(values[c])[i];
        col.ints[static_cast<std::size_t>(r)] = v;
        widen_both(bb.ints_min, bb.ints_max, h.ints_min, h.ints_max, b, v);
      } else {
        const double v = static_cast<const double*>(values[c])[i];
        col.reals[static_cast<std::size_t>(r)] = v;
        widen_both(bb.reals_min, bb.reals_max, h.reals_min, h.reals_max, b, v);
      }
    }
  }
}

}  // namespace shardtopk
