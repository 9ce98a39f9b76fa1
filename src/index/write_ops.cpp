// The broadcast form of planned writes: per op, u64 seq, kills, rows, then [kills] (rank, slot)
// pairs, [rows] (rank, slot) pairs, [rows] ids, [rows, dim] float32 (padded to 8 bytes), each
// column's [rows] 8-byte values, and the largest norm with its id.
#include "index/write_ops.hpp"

#include <cstring>

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

std::size_t WriteOp::encoded_bytes(std::int64_t dim) const {
  const std::size_t r = ids.size();
  return 8 * 3 + 16 * (kills.size() + r) + 8 * r + (4 * r * static_cast<std::size_t>(dim) + 7) / 8 * 8 +
         8 * r * columns.size() + 16;
}

std::vector<std::uint8_t> encode_write_ops(const std::vector<WriteOp>& ops, std::int64_t dim) {
  std::size_t total = 8;
  for (const WriteOp& op : ops) total += op.encoded_bytes(dim);
  std::vector<std::uint8_t> out;
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
  return out;
}

std::vector<WriteOp> decode_write_ops(const std::uint8_t* data, std::size_t size, std::int64_t dim, int columns) {
  Reader r(data, size);
  const auto n = r.pod<std::uint64_t>();
  SHARDTOPK_ASSERT(n <= size / 24);
  std::vector<WriteOp> ops(static_cast<std::size_t>(n));
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
    op.columns.assign(static_cast<std::size_t>(columns), std::vector<std::uint64_t>(static_cast<std::size_t>(rows)));
    for (auto& c : op.columns) r.bytes(c.data(), 8 * c.size());
    op.max_norm = r.pod<double>();
    op.max_norm_id = r.pod<std::int64_t>();
  }
  SHARDTOPK_ASSERT(r.done(), "write ops: trailing bytes");
  return ops;
}

}  // namespace shardtopk
