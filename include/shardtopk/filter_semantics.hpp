#pragma once
// The meaning of a filter program's leaves and of the block verdicts, in one place for the host
// evaluator (src/filter/filter_eval.cpp) and the GPU kernel
// (src/engine/cuda/kernels/filter_mask.cu). Internal header: plain C++ that nvcc also compiles.
//
// Verdicts over a block: 0 = no row can pass, 1 = some may, 2 = every row passes. With that
// order, "and" is the minimum, "or" the maximum and "not" is 2 - v, each sound when its operands
// are.
#include <cstdint>

#include "shardtopk/filter.hpp"

#if defined(__CUDACC__)
#define STK_FILTER_HD __host__ __device__ __forceinline__
#else
#define STK_FILTER_HD inline
#endif

namespace shardtopk::filter_detail {

inline constexpr std::uint8_t kVerdictNone = 0;
inline constexpr std::uint8_t kVerdictSome = 1;
inline constexpr std::uint8_t kVerdictAll = 2;

/// First index i in [0, n) with !(set[i] < v), or n (std::lower_bound), without data-dependent
/// branches: the probe moves by a conditional select, so random values cost no mispredictions.
template <class T>
STK_FILTER_HD int lower_index(const T* set, int n, T v) {
  if (n <= 0) return 0;
  const T* base = set;
  while (n > 1) {
    const int half = n / 2;
    base = base[half] < v ? base + half : base;
    n -= half;
  }
  return static_cast<int>(base - set) + (*base < v ? 1 : 0);
}

/// Sets up to this size are searched by a linear scan (no branches, one pass over a cache line
/// or two; on the GPU every thread of a warp reads the same constants).
inline constexpr int kLinearSetMax = 16;

/// v ∈ set (strictly increasing, n values). Floats compare as IEEE: -0.0 finds 0.0.
template <class T>
STK_FILTER_HD bool in_set(const T* set, int n, T v) {
  if (n <= kLinearSetMax) {
    bool found = false;
    for (int k = 0; k < n; ++k) found |= set[k] == v;
    return found;
  }
  const int i = lower_index(set, n, v);
  return i < n && set[i] == v;
}

/// lo <= v <= hi.
template <class T>
STK_FILTER_HD bool in_range(T v, T lo, T hi) {
  return (lo <= v) & (v <= hi);  // both comparisons, no branch
}

/// Verdict of "lo <= v <= hi" over values v known to lie in [mn, mx].
template <class T>
STK_FILTER_HD std::uint8_t range_verdict(T mn, T mx, T lo, T hi) {
  if (mx < lo || mn > hi) return kVerdictNone;
  if (lo <= mn && mx <= hi) return kVerdictAll;
  return kVerdictSome;
}

/// Verdict of "v ∈ set" over int64 values in [mn, mx]: none when no member lies in [mn, mx];
/// all when every integer of [mn, mx] is a member (the members there number mx - mn + 1).
STK_FILTER_HD std::uint8_t int_set_verdict(const std::int64_t* set, int n, std::int64_t mn, std::int64_t mx) {
  const int i = lower_index(set, n, mn);
  if (i == n || set[i] > mx) return kVerdictNone;
  int j = lower_index(set, n, mx);
  if (j < n && set[j] == mx) ++j;  // one past the last member <= mx
  const std::uint64_t width = static_cast<std::uint64_t>(mx) - static_cast<std::uint64_t>(mn);
  return width == static_cast<std::uint64_t>(j - i - 1) ? kVerdictAll : kVerdictSome;
}

/// Verdict of "v ∈ set" over float64 values in [mn, mx]: all only when mn == mx is a member.
STK_FILTER_HD std::uint8_t real_set_verdict(const double* set, int n, double mn, double mx) {
  const int i = lower_index(set, n, mn);
  if (i == n || set[i] > mx) return kVerdictNone;
  return mn == mx ? kVerdictAll : kVerdictSome;  // then mn <= set[i] <= mx makes set[i] == mn
}

STK_FILTER_HD std::uint8_t verdict_not(std::uint8_t a) { return static_cast<std::uint8_t>(2 - a); }
STK_FILTER_HD std::uint8_t verdict_and(std::uint8_t a, std::uint8_t b) { return a < b ? a : b; }
STK_FILTER_HD std::uint8_t verdict_or(std::uint8_t a, std::uint8_t b) { return a > b ? a : b; }

/// The verdict of every instruction of a program [n_ops] over one summary block into
/// states[n_ops], and the program's; `leaf(op)` gives a leaf's verdict from the block's
/// summaries. A compiled program's stack never holds more than kFilterMaxStack values.
template <class Leaf>
STK_FILTER_HD std::uint8_t block_verdicts(const FilterOp* ops, int n_ops, const Leaf& leaf, std::uint8_t* states) {
  std::uint8_t stack[kFilterMaxStack];
  int sp = 0;
  for (int i = 0; i < n_ops; ++i) {
    const FilterOp op = ops[i];
    std::uint8_t v;
    switch (op.code) {
      case FilterOpCode::kTrue: v = kVerdictAll; break;
      case FilterOpCode::kFalse: v = kVerdictNone; break;
      case FilterOpCode::kNot: v = verdict_not(stack[--sp]); break;
      case FilterOpCode::kAnd: sp -= 2; v = verdict_and(stack[sp], stack[sp + 1]); break;
      case FilterOpCode::kOr: sp -= 2; v = verdict_or(stack[sp], stack[sp + 1]); break;
      default: v = leaf(op); break;
    }
    states[i] = v;
    stack[sp++] = v;
  }
  return stack[0];
}

}  // namespace shardtopk::filter_detail
