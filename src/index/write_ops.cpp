// The broadcast form of planned writes: per op, u64 seq, kills, rows, then [kills] (rank, slot)
// pairs, [rows] (rank, slot) pairs, [rows] ids, [rows, dim] float32 (padded to 8 bytes), each
// column's [rows] 8-byte values, and the largest norm with its id.
#include "index/write_ops.hpp"

#include <algorithm>
#include <cstring>

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
  return encoded_bytes(kills.size(), ids.size(), dim, columns.size());
}

std::size_t WriteOp::encoded_bytes(std::size_t kills, std::size_t r, std::int64_t dim, std::size_t columns) {
  return 8 * 3 + 16 * (kills + r) + 8 * r + (4 * r * static_cast<std::size_t>(dim) + 7) / 8 * 8 + 8 * r * columns +
         16;
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
  WriteMerger m;
  m.start(dim, columns);
  for (const WriteOp& op : ops) m.add(op);
  m.finish(merged);
}

namespace {
std::uint64_t slot_key(const SlotRef& s) { return (static_cast<std::uint64_t>(s.rank) << 48) | static_cast<std::uint64_t>(s.slot); }
}  // namespace

void WriteMerger::start(std::int64_t dim, std::size_t columns) {
  dim_ = dim;
  rows_.reset(columns);
  kept_.clear();
  row_op_.clear();
  row_norm_.clear();
  op_norm_.clear();
  last_.clear();
  killed_.clear();
}

void WriteMerger::add(const WriteOp& op) {
  columns_.resize(op.columns.size());
  for (std::size_t c = 0; c < op.columns.size(); ++c) columns_[c] = op.columns[c].data();
  add(op, op.ids.data(), op.vectors.data(), columns_.data());
}

void WriteMerger::add(const WriteOp& op, const std::int64_t* ids, const float* vectors,
                      const void* const* columns) {
  const auto o = static_cast<std::uint32_t>(op_norm_.size());
  const std::size_t base = rows_.places.size(), n = op.places.size(), d = static_cast<std::size_t>(dim_);
  const bool known = op.norms.size() == n;
  op_norm_.push_back(OpNorm{op.max_norm, op.max_norm_id, known});
  rows_.seq = op.seq;
  // Kills first: a slot's row written earlier in the group dies with it.
  for (const SlotRef& k : op.kills) {
    const std::uint64_t key = slot_key(k);
    if (killed_.insert(key).second) rows_.kills.push_back(k);
    const auto it = last_.find(key);
    if (it != last_.end()) {
      kept_[it->second] = 0;
      last_.erase(it);
    }
  }
  // Then the rows: each replaces the row written to its slot before it.
  kept_.resize(base + n, 1);
  for (std::size_t i = 0; i < n; ++i) {
    const auto [it, fresh] = last_.try_emplace(slot_key(op.places[i]), base + i);
    if (!fresh) {
      kept_[it->second] = 0;
      it->second = base + i;
    }
  }
  rows_.places.insert(rows_.places.end(), op.places.begin(), op.places.end());
  rows_.ids.insert(rows_.ids.end(), ids, ids + n);
  rows_.vectors.insert(rows_.vectors.end(), vectors, vectors + n * d);
  for (std::size_t c = 0; c < rows_.columns.size(); ++c) {
    const auto* v = static_cast<const std::uint64_t*>(columns[c]);
    rows_.columns[c].insert(rows_.columns[c].end(), v, v + n);
  }
  row_op_.resize(base + n, o);
  if (known) row_norm_.insert(row_norm_.end(), op.norms.begin(), op.norms.end());
  else row_norm_.resize(base + n, 0.0);
}

void WriteMerger::finish(WriteOp* merged) {
  SHARDTOPK_ASSERT(!op_norm_.empty(), "finish of an empty group");
  const std::size_t total = rows_.places.size(), d = static_cast<std::size_t>(dim_);
  // The rows kept, by rank and in (op, row) order within a rank (a counting sort by rank).
  std::int32_t max_rank = 0;
  for (std::size_t i = 0; i < total; ++i)
    if (kept_[i]) max_rank = std::max(max_rank, rows_.places[i].rank);
  at_.assign(static_cast<std::size_t>(max_rank) + 2, 0);
  for (std::size_t i = 0; i < total; ++i)
    if (kept_[i]) ++at_[static_cast<std::size_t>(rows_.places[i].rank) + 1];
  for (std::size_t r = 1; r < at_.size(); ++r) at_[r] += at_[r - 1];
  const std::size_t n = at_.back();
  order_.resize(n);
  for (std::size_t i = 0; i < total; ++i)
    if (kept_[i]) order_[at_[static_cast<std::size_t>(rows_.places[i].rank)]++] = i;
  // The bound is the largest norm among the rows kept (a row killed in the group never counts):
  // an op's own largest when its row is kept, else the largest of its rows that are.
  double max_norm = 0.0;
  std::int64_t max_norm_id = -1;
  auto consider = [&](double norm, std::int64_t id) {
    if (max_norm_id < 0 || norm > max_norm) {
      max_norm = norm;
      max_norm_id = id;
    }
  };
  max_kept_.assign(op_norm_.size(), 0);
  for (const std::size_t i : order_) max_kept_[row_op_[i]] |= rows_.ids[i] == op_norm_[row_op_[i]].max_norm_id ? 1 : 0;
  for (const std::size_t i : order_) {
    const OpNorm& op = op_norm_[row_op_[i]];
    if (max_kept_[row_op_[i]]) {
      if (rows_.ids[i] == op.max_norm_id) consider(op.max_norm, op.max_norm_id);
    } else {
      consider(op.known ? row_norm_[i] : shard_norms(rows_.vectors.data() + i * d, 1, dim_, 0, 1).max_norm,
               rows_.ids[i]);
    }
  }
  WriteOp& out = *merged;
  if (std::is_sorted(order_.begin(), order_.end())) {
    // Already grouped by rank (always so on one rank): the rows dropped are squeezed out in place.
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t i = order_[j];
      if (i == j) continue;
      rows_.places[j] = rows_.places[i];
      rows_.ids[j] = rows_.ids[i];
      std::memmove(rows_.vectors.data() + j * d, rows_.vectors.data() + i * d, d * sizeof(float));
      for (auto& c : rows_.columns) c[j] = c[i];
    }
    rows_.places.resize(n);
    rows_.ids.resize(n);
    rows_.vectors.resize(n * d);
    for (auto& c : rows_.columns) c.resize(n);
    std::swap(out, rows_);
  } else {
    out.seq = rows_.seq;
    out.kills.swap(rows_.kills);
    out.places.resize(n);
    out.ids.resize(n);
    out.vectors.resize(n * d);
    out.columns.resize(rows_.columns.size());
    for (auto& c : out.columns) c.resize(n);
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t i = order_[j];
      out.places[j] = rows_.places[i];
      out.ids[j] = rows_.ids[i];
      std::memcpy(out.vectors.data() + j * d, rows_.vectors.data() + i * d, d * sizeof(float));
      for (std::size_t c = 0; c < out.columns.size(); ++c) out.columns[c][j] = rows_.columns[c][i];
    }
  }
  out.norms.clear();
  out.max_norm = max_norm;
  out.max_norm_id = max_norm_id;
  start(dim_, out.columns.size());
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
