#pragma once
// A compiled filter program on the device (device code): its view inside the packed buffer
// (pack_filter_programs), the verdict of a leaf and of the whole program over one summary
// block, and the row evaluator. The meaning of every leaf and verdict is in
// shardtopk/filter_semantics.hpp, shared with the host evaluator.

#include <cstdint>

#include "engine/cuda/kernels/filter_table.cuh"
#include "shardtopk/filter.hpp"
#include "shardtopk/filter_semantics.hpp"

namespace shardtopk::cuda_detail {

static_assert(kFilterMaxStack <= 64, "the row evaluator's stack is one 64-bit register");

/// A program inside the packed buffer: its instructions and constant pools.
struct ProgramView {
  const FilterOp* ops;
  const std::int64_t* ints;
  const double* reals;
  int n_ops;
};

__device__ __forceinline__ ProgramView program_at(const std::uint8_t* packed, int p) {
  const std::uint64_t off = reinterpret_cast<const std::uint64_t*>(packed)[1 + p];
  const std::uint8_t* image = packed + off;
  const auto* h = reinterpret_cast<const FilterImageHeader*>(image);
  ProgramView v;
  v.n_ops = h->n_ops;
  v.ops = reinterpret_cast<const FilterOp*>(image + sizeof(FilterImageHeader));
  v.ints = reinterpret_cast<const std::int64_t*>(v.ops + h->n_ops);
  v.reals = reinterpret_cast<const double*>(v.ints + h->n_ints);
  return v;
}

__device__ __forceinline__ bool is_leaf(FilterOpCode c) {
  return c == FilterOpCode::kRangeInt || c == FilterOpCode::kRangeReal || c == FilterOpCode::kInInt ||
         c == FilterOpCode::kInReal;
}

/// A leaf over one summary block: its verdict, and for `in` leaves the members that can match a
/// value of the block ([first, first + count) of the pool: those within the block's bounds), so
/// that a row searches a few members instead of the whole list (an ids_in of a million ids).
/// Plain members only: a __shared__ array of it needs no constructor.
struct LeafState {
  std::uint8_t verdict;
  std::int32_t first;
  std::int32_t count;
};

__device__ __forceinline__ std::int64_t bounds_row(const DeviceFilterTable& t, int column) {
  return column == kFilterIdColumn ? t.columns : column;
}

/// lower_index (filter_semantics.hpp) by the 32 lanes of a warp together: each step probes 32
/// evenly spaced members, so a million-member set takes four steps of one load each instead of
/// twenty dependent loads. Every lane of the warp calls it and gets the same index.
template <class T>
__device__ __forceinline__ int warp_lower_index(const T* set, int n, T v) {
  const int lane = threadIdx.x & 31;
  int lo = 0, hi = n;  // the answer is in [lo, hi]
  while (hi - lo > 32) {
    const int step = (hi - lo + 31) / 32;
    const int at = lo + lane * step;
    const int below = __popc(__ballot_sync(0xffffffffu, at < hi && set[at] < v));  // a prefix of the probes
    const int nlo = below > 0 ? lo + (below - 1) * step + 1 : lo;
    hi = min(hi, lo + below * step);
    lo = nlo;
  }
  return lo + __popc(__ballot_sync(0xffffffffu, lo + lane < hi && set[lo + lane] < v));
}

/// The members of set [n] (strictly increasing) within [mn, mx] as [*i, *j), by a warp together.
template <class T>
__device__ __forceinline__ void warp_members_within(const T* set, int n, T mn, T mx, int* i, int* j) {
  *i = warp_lower_index(set, n, mn);
  int e = warp_lower_index(set, n, mx);
  if (e < n && set[e] == mx) ++e;
  *j = e < *i ? *i : e;
}

/// A leaf's verdict over block b (no narrowing).
__device__ inline std::uint8_t leaf_verdict(const DeviceFilterTable& t, const ProgramView& p, const FilterOp& op,
                                            std::int64_t b) {
  using namespace filter_detail;
  const std::int64_t at = bounds_row(t, op.column) * t.blocks + b;
  const std::uint64_t lo_bits = t.block_min[at], hi_bits = t.block_max[at];
  const std::int64_t imn = static_cast<std::int64_t>(lo_bits), imx = static_cast<std::int64_t>(hi_bits);
  const double rmn = __longlong_as_double(static_cast<long long>(lo_bits));
  const double rmx = __longlong_as_double(static_cast<long long>(hi_bits));
  switch (op.code) {
    case FilterOpCode::kRangeInt: return range_verdict(imn, imx, p.ints[op.first], p.ints[op.first + 1]);
    case FilterOpCode::kRangeReal: return range_verdict(rmn, rmx, p.reals[op.first], p.reals[op.first + 1]);
    case FilterOpCode::kInInt: return int_set_verdict(p.ints + op.first, op.count, imn, imx);
    case FilterOpCode::kInReal: return real_set_verdict(p.reals + op.first, op.count, rmn, rmx);
    default: return kVerdictSome;
  }
}

/// leaf_verdict and, for `in` leaves, the members within the block's bounds, by the 32 lanes of
/// a warp together (every lane gets the same state). The verdict is the set verdict over those
/// members alone: the others lie outside the block's bounds.
__device__ inline LeafState leaf_state_warp(const DeviceFilterTable& t, const ProgramView& p, const FilterOp& op,
                                            std::int64_t b) {
  using namespace filter_detail;
  if (op.code != FilterOpCode::kInInt && op.code != FilterOpCode::kInReal)
    return LeafState{leaf_verdict(t, p, op, b), op.first, op.count};
  const std::int64_t at = bounds_row(t, op.column) * t.blocks + b;
  const std::uint64_t lo_bits = t.block_min[at], hi_bits = t.block_max[at];
  int i = 0, j = 0;
  LeafState s{kVerdictSome, op.first, op.count};
  if (op.code == FilterOpCode::kInInt) {
    const std::int64_t mn = static_cast<std::int64_t>(lo_bits), mx = static_cast<std::int64_t>(hi_bits);
    warp_members_within(p.ints + op.first, op.count, mn, mx, &i, &j);
    s.verdict = int_set_verdict(p.ints + op.first + i, j - i, mn, mx);
  } else {
    const double mn = __longlong_as_double(static_cast<long long>(lo_bits));
    const double mx = __longlong_as_double(static_cast<long long>(hi_bits));
    warp_members_within(p.reals + op.first, op.count, mn, mx, &i, &j);
    s.verdict = real_set_verdict(p.reals + op.first + i, j - i, mn, mx);
  }
  s.first = op.first + i;
  s.count = j - i;
  return s;
}

/// The program's verdict over block b (filter_detail::block_verdicts: the interval analysis).
__device__ inline std::uint8_t block_verdict(const DeviceFilterTable& t, const ProgramView& p, std::int64_t b) {
  std::uint8_t states[kFilterMaxOps];  // per-instruction verdicts, unused here
  return filter_detail::block_verdicts(
      p.ops, p.n_ops, [&](const FilterOp& op) { return leaf_verdict(t, p, op, b); }, states);
}

/// Whether row r (of the block `leaves` was made for) passes. Leaves the block's summaries
/// decide are not read; `in` leaves search only their members within the block's bounds.
/// `leaves` nullptr: every leaf evaluated on the row, `in` leaves over their whole list (only
/// t.values, t.global_ids and t.rows are read).
__device__ inline bool eval_row(const DeviceFilterTable& t, const ProgramView& p, const FilterOp* ops,
                                const LeafState* leaves, std::int64_t r) {
  using namespace filter_detail;
  std::uint64_t st = 0;  // bit 0 is the top of the stack
  for (int i = 0; i < p.n_ops; ++i) {
    const FilterOp op = ops[i];
    if (op.code == FilterOpCode::kNot) {
      st ^= 1u;
      continue;
    }
    if (op.code == FilterOpCode::kAnd || op.code == FilterOpCode::kOr) {
      const std::uint64_t b = st & 1u;
      st >>= 1;
      st = op.code == FilterOpCode::kAnd ? (st & (~std::uint64_t{1} | b)) : (st | b);
      continue;
    }
    bool v;
    if (op.code == FilterOpCode::kTrue || op.code == FilterOpCode::kFalse) {
      v = op.code == FilterOpCode::kTrue;
    } else if (leaves && leaves[i].verdict != kVerdictSome) {
      v = leaves[i].verdict == kVerdictAll;
    } else if (op.code == FilterOpCode::kRangeInt || op.code == FilterOpCode::kInInt) {
      const std::int64_t x = op.column == kFilterIdColumn
                                 ? t.global_ids[r]
                                 : static_cast<std::int64_t>(t.values[static_cast<std::int64_t>(op.column) * t.rows + r]);
      v = op.code == FilterOpCode::kRangeInt
              ? in_range(x, p.ints[op.first], p.ints[op.first + 1])
              : in_set(p.ints + (leaves ? leaves[i].first : op.first), leaves ? leaves[i].count : op.count, x);
    } else {
      const double x =
          __longlong_as_double(static_cast<long long>(t.values[static_cast<std::int64_t>(op.column) * t.rows + r]));
      v = op.code == FilterOpCode::kRangeReal
              ? in_range(x, p.reals[op.first], p.reals[op.first + 1])
              : in_set(p.reals + (leaves ? leaves[i].first : op.first), leaves ? leaves[i].count : op.count, x);
    }
    st = (st << 1) | static_cast<std::uint64_t>(v);
  }
  return (st & 1u) != 0;
}

}  // namespace shardtopk::cuda_detail
