// The broadcast form of planned writes: per op, u64 seq, kills, rows, then [kills] (rank, slot)
// pairs, [rows] (rank, slot) pairs, [rows] ids, [rows, dim] float32 (padded to 8 bytes), each
// column's [rows] 8-byte values, and the largest norm with its id.
#include "index/write_ops.hpp"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "index/admission.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk {
namespace {

class Writer {
 public:
  explicit Writer(std::vector<std::uint8_t>& out) : out_(out) {}
  void bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    if (n) out_.insert(out_.end(), b, b + n);
    out_.resize((out_.size() + 7) / 8 * 8, 0);
  }
  template <typename T>
  void pod(const T& v) {
    bytes(&v, sizeof v);
  }
  void places(const std::vector<SlotRef>& v) {
    for (const SlotRef& p : v) {
      pod(static_cast<std::int64_t>(p.rank));
      pod(p.slot);
    }
  }

 private:
  std::vector<std::uint8_t>& out_;
};

class Reader {
 public:
  Reader(const std::uint8_t* p, std::size_t n) : p_(p), n_(n) {}
  void bytes(void* dst, std::size_t n) {
    const std::size_t padded = (n + 7) / 8 * 8;
    SHARDTOPK_ASSERT(at_ + padded <= n_, "write ops: ", n, " bytes past the end at ", at_, " of ", n_);
    if (n) std::memcpy(dst, p_ + at_, n);
    at_ += padded;
  }
  template <typename T>
  T pod() {
    T v{};
    bytes(&v, sizeof v);
    return v;
  }
  std::vector<SlotRef> places(std::uint64_t n) {
    SHARDTOPK_ASSERT(n <= (n_ - at_) / 16);
    std::vector<SlotRef> v(static_cast<std::size_t>(n));
    for (SlotRef& p : v) {
      p.rank = static_cast<std::int32_t>(pod<std::int64_t>());
      p.slot = pod<std::int64_t>();
    }
    return v;
  }
  bool done() const { return at_ == n_; }

 private:
  const std::uint8_t* p_;
  std::size_t n_, at_ = 0;
};

}  // namespace

void WriteOp::reset(std::size_t n_columns) {
  seq = 0;
  kills.clear();
  places.clear();
  ids.clear();
  vectors.clear();
  columns.resize(n_columns);
  for (auto& c : columns) c.clear();
  max_norm = 0.0;
  max_norm_id = -1;
  norms.clear();
}

std::size_t WriteOp::encoded_bytes(std::int64_t dim) const {
  const std::size_t r = ids.size();
  return 8 * 3 + 16 * (kills.size() + r) + 8 * r + (4 * r * static_cast<std::size_t>(dim) + 7) / 8 * 8 +
         8 * r * columns.size() + 16;
}

WriteOp merge_write_ops(std::vector<WriteOp>&& ops, std::int64_t dim, std::size_t columns) {
  WriteOp out;
  merge_write_ops(std::move(ops), dim, columns, &out);
  return out;
}

void merge_write_ops(std::vector<WriteOp>&& ops, std::int64_t dim, std::size_t columns, WriteOp* merged) {
  if (ops.size() == 1 && std::is_sorted(ops[0].places.begin(), ops[0].places.end(),
                                        [](const SlotRef& a, const SlotRef& b) { return a.rank < b.rank; })) {
    std::swap(*merged, ops.front());
    return;
  }
  WriteOp& out = *merged;
  out.kills.clear();
  out.norms.clear();
  auto key = [](const SlotRef& s) { return (static_cast<std::uint64_t>(s.rank) << 48) | static_cast<std::uint64_t>(s.slot); };
  std::size_t places = 0, kills = 0;
  std::int32_t max_rank = 0;
  for (const WriteOp& op : ops) {
    places += op.places.size();
    kills += op.kills.size();
    for (const SlotRef& p : op.places) max_rank = std::max(max_rank, p.rank);
  }
  // Slot -> (op, row) of the last row written to it and not killed since.
  std::unordered_map<std::uint64_t, std::pair<std::uint32_t, std::uint32_t>> last;
  std::unordered_set<std::uint64_t> killed;
  last.reserve(places);
  killed.reserve(kills);
  out.kills.reserve(kills);
  for (std::uint32_t o = 0; o < ops.size(); ++o) {
    const WriteOp& op = ops[o];
    for (const SlotRef& k : op.kills) {
      if (killed.insert(key(k)).second) out.kills.push_back(k);
      last.erase(key(k));
    }
    for (std::uint32_t i = 0; i < op.places.size(); ++i) last[key(op.places[i])] = {o, i};
  }
  // The rows kept, by rank and in (op, row) order within a rank: a pass in op order keeps each
  // slot's last row, and a counting sort by rank keeps that order.
  std::vector<std::size_t> at(static_cast<std::size_t>(max_rank) + 2, 0);
  for (const auto& kv : last) ++at[static_cast<std::size_t>(ops[kv.second.first].places[kv.second.second].rank) + 1];
  for (std::size_t r = 1; r < at.size(); ++r) at[r] += at[r - 1];
  std::vector<std::pair<std::uint32_t, std::uint32_t>> rows(last.size());  // (op, row)
  for (std::uint32_t o = 0; o < ops.size(); ++o)
    for (std::uint32_t i = 0; i < ops[o].places.size(); ++i) {
      const SlotRef& p = ops[o].places[i];
      const auto it = last.find(key(p));
      if (it != last.end() && it->second == std::make_pair(o, i)) rows[at[static_cast<std::size_t>(p.rank)]++] = {o, i};
    }
  const std::size_t n = rows.size(), d = static_cast<std::size_t>(dim);
  out.seq = ops.back().seq;
  out.places.resize(n);
  out.ids.resize(n);
  out.vectors.resize(n * d);
  out.columns.resize(columns);
  for (auto& c : out.columns) c.resize(n);
  out.max_norm = 0.0;
  out.max_norm_id = -1;
  for (std::size_t j = 0; j < n; ++j) {
    const WriteOp& op = ops[rows[j].first];
    const std::size_t i = rows[j].second;
    out.places[j] = op.places[i];
    out.ids[j] = op.ids[i];
    std::memcpy(out.vectors.data() + j * d, op.vectors.data() + i * d, d * sizeof(float));
    for (std::size_t c = 0; c < columns; ++c) out.columns[c][j] = op.columns[c][i];
  }
  // The bound is the largest norm among the rows kept (a row killed in the group never counts):
  // an op's own largest when its row is kept, else the largest of its rows that are.
  std::vector<std::uint8_t> max_kept(ops.size(), 0);
  for (const auto& [o, i] : rows) max_kept[o] |= ops[o].ids[i] == ops[o].max_norm_id ? 1 : 0;
  auto consider = [&](double norm, std::int64_t id) {
    if (out.max_norm_id < 0 || norm > out.max_norm) {
      out.max_norm = norm;
      out.max_norm_id = id;
    }
  };
  for (const auto& [o, i] : rows) {
    const WriteOp& op = ops[o];
    if (max_kept[o]) {
      if (op.ids[i] == op.max_norm_id) consider(op.max_norm, op.max_norm_id);
    } else {
      consider(op.norms.size() == op.ids.size() ? op.norms[i]
                                                : shard_norms(op.vectors.data() + i * d, 1, dim, 0, 1).max_norm,
               op.ids[i]);
    }
  }
}

std::vector<std::uint8_t> encode_write_ops(const std::vector<WriteOp>& ops, std::int64_t dim) {
  std::vector<std::uint8_t> out;
  encode_write_ops(ops, dim, &out);
  return out;
}

void encode_write_ops(const std::vector<WriteOp>& ops, std::int64_t dim, std::vector<std::uint8_t>* bytes) {
  std::size_t total = 8;
  for (const WriteOp& op : ops) total += op.encoded_bytes(dim);
  std::vector<std::uint8_t>& out = *bytes;
  out.clear();
  out.reserve(total);
  Writer w(out);
  w.pod(static_cast<std::uint64_t>(ops.size()));
  for (const WriteOp& op : ops) {
    SHARDTOPK_ASSERT(op.places.size() == op.ids.size() && op.vectors.size() == op.ids.size() * static_cast<std::size_t>(dim));
    w.pod(op.seq);
    w.pod(static_cast<std::uint64_t>(op.kills.size()));
    w.pod(static_cast<std::uint64_t>(op.ids.size()));
    w.places(op.kills);
    w.places(op.places);
    w.bytes(op.ids.data(), 8 * op.ids.size());
    w.bytes(op.vectors.data(), 4 * op.vectors.size());
    for (const auto& c : op.columns) {
      SHARDTOPK_ASSERT(c.size() == op.ids.size());
      w.bytes(c.data(), 8 * c.size());
    }
    w.pod(op.max_norm);
    w.pod(op.max_norm_id);
  }
  SHARDTOPK_ASSERT(out.size() == total);
}

std::vector<WriteOp> decode_write_ops(const std::uint8_t* data, std::size_t size, std::int64_t dim, int columns) {
  std::vector<WriteOp> ops;
  decode_write_ops(data, size, dim, columns, &ops);
  return ops;
}

void decode_write_ops(const std::uint8_t* data, std::size_t size, std::int64_t dim, int columns,
                      std::vector<WriteOp>* out) {
  Reader r(data, size);
  const auto n = r.pod<std::uint64_t>();
  SHARDTOPK_ASSERT(n <= size / 24);
  std::vector<WriteOp>& ops = *out;
  ops.resize(static_cast<std::size_t>(n));
  for (WriteOp& op : ops) {
    op.seq = r.pod<std::uint64_t>();
    const auto kills = r.pod<std::uint64_t>();
    const auto rows = r.pod<std::uint64_t>();
    op.kills = r.places(kills);
    op.places = r.places(rows);
    op.ids.resize(static_cast<std::size_t>(rows));
    r.bytes(op.ids.data(), 8 * op.ids.size());
    op.vectors.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(dim));
    r.bytes(op.vectors.data(), 4 * op.vectors.size());
    op.columns.resize(static_cast<std::size_t>(columns));
    for (auto& c : op.columns) {
      c.resize(static_cast<std::size_t>(rows));
      r.bytes(c.data(), 8 * c.size());
    }
    op.max_norm = r.pod<double>();
    op.max_norm_id = r.pod<std::int64_t>();
    op.norms.clear();
  }
  SHARDTOPK_ASSERT(r.done(), "write ops: trailing bytes");
}

}  // namespace shardtopk
