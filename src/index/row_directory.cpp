// RowDirectory: live ids → (rank, slot), free slots, the placement rule.
#include "index/row_directory.hpp"

#include <algorithm>

#include "shardtopk/error.hpp"

namespace shardtopk {

RowDirectory::RowDirectory(std::vector<std::int64_t> base_rows, std::vector<std::int64_t> capacity,
                           const std::vector<std::int64_t>& base_ids)
    : base_rows_(std::move(base_rows)), capacity_(std::move(capacity)) {
  SHARDTOPK_ASSERT(base_rows_.size() == capacity_.size() && !capacity_.empty());
  const std::size_t p = capacity_.size();
  base_lo_.assign(p, 0);
  used_.assign(p, 0);
  next_.assign(p, 0);
  freed_.resize(p);
  for (std::size_t r = 0; r < p; ++r) {
    SHARDTOPK_ASSERT(base_rows_[r] >= 0 && base_rows_[r] <= capacity_[r] && capacity_[r] < (1LL << 48));
    base_lo_[r] = base_total_;
    base_total_ += base_rows_[r];
    used_[r] = next_[r] = base_rows_[r];
    capacity_total_ += capacity_[r];
  }
  live_ = base_total_;
  free_total_ = capacity_total_ - base_total_;
  if (!base_ids.empty()) {
    SHARDTOPK_ASSERT(static_cast<std::int64_t>(base_ids.size()) == base_total_);
    base_sorted_.reserve(base_ids.size());
    for (std::int64_t g = 0; g < base_total_; ++g) base_sorted_.emplace_back(base_ids[static_cast<std::size_t>(g)], g);
    std::sort(base_sorted_.begin(), base_sorted_.end());
    for (std::size_t i = 1; i < base_sorted_.size(); ++i)
      SHARDTOPK_EXPECTS(base_sorted_[i].first != base_sorted_[i - 1].first, "the corpus ids are not unique: id ",
                        base_sorted_[i].first, " appears more than once");
  }
}

std::optional<SlotRef> RowDirectory::base_place(std::int64_t id) const {
  std::int64_t g = -1;
  if (base_sorted_.empty()) {
    if (id >= 0 && id < base_total_) g = id;
  } else {
    const auto it = std::lower_bound(base_sorted_.begin(), base_sorted_.end(), std::make_pair(id, std::int64_t{-1}));
    if (it != base_sorted_.end() && it->first == id) g = it->second;
  }
  if (g < 0) return std::nullopt;
  const auto r = static_cast<std::size_t>(std::upper_bound(base_lo_.begin(), base_lo_.end(), g) - base_lo_.begin() - 1);
  // Ranks with no base rows share their base_lo_ with the next one: step to the one that holds g.
  std::size_t rr = r;
  while (g - base_lo_[rr] >= base_rows_[rr]) ++rr;
  return SlotRef{static_cast<std::int32_t>(rr), g - base_lo_[rr]};
}

std::optional<SlotRef> RowDirectory::find(std::int64_t id) const {
  const auto it = overrides_.find(id);
  if (it != overrides_.end()) {
    if (it->second == kDeleted) return std::nullopt;
    return unpack(it->second);
  }
  return base_place(id);
}

SlotRef RowDirectory::erase(std::int64_t id) {
  const std::optional<SlotRef> at = find(id);
  SHARDTOPK_ASSERT(at.has_value(), "erase of id ", id, ", which is not live");
  if (base_place(id)) overrides_[id] = kDeleted;
  else overrides_.erase(id);
  freed_[static_cast<std::size_t>(at->rank)].push(at->slot);
  --used_[static_cast<std::size_t>(at->rank)];
  --live_;
  ++free_total_;
  return *at;
}

SlotRef RowDirectory::place(std::int64_t id) {
  SHARDTOPK_ASSERT(free_total_ > 0 && !find(id).has_value());
  std::size_t best = 0;
  for (std::size_t r = 1; r < capacity_.size(); ++r)
    if (capacity_[r] - used_[r] > capacity_[best] - used_[best]) best = r;
  SlotRef p{static_cast<std::int32_t>(best), 0};
  auto& freed = freed_[best];
  if (!freed.empty()) {  // freed slots are below next_: the lowest free slot
    p.slot = freed.top();
    freed.pop();
  } else {
    p.slot = next_[best]++;
  }
  ++used_[best];
  ++live_;
  --free_total_;
  overrides_[id] = pack(p);
  return p;
}

std::int64_t RowDirectory::tombstones() const {
  std::int64_t t = 0;
  for (const auto& f : freed_) t += static_cast<std::int64_t>(f.size());
  return t;
}

}  // namespace shardtopk
