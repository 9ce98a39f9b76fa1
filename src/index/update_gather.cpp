// The update coordinator's step that gathers the ids of every rank's live rows that pass a filter
// to rank 0 (deletes by filter).
#include <algorithm>
#include <cstring>
#include <optional>

#include "core/log.hpp"
#include "index/update_coordinator.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk {

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
