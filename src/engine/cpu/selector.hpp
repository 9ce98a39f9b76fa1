#pragma once
// The CPU engine's per-thread top-k selection.

#include <algorithm>
#include <cstdint>

#include "shardtopk/ordering.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk::cpu_detail {

// Per query: a buffer of candidates and a threshold, the K-th best candidate as of the last
// compaction (padding until K were seen). A candidate enters only when better than the
// threshold, which no candidate of the final top K can fail (K seen ones are better than it), so
// the result is exactly the top K of all offered rows under the ordering rule, whatever the
// order rows come in. When the buffer is full, nth_element keeps the best K and raises the
// threshold: a few cycles per entering row instead of a heap sift-down.
// Buffer slots per query for K: compaction every cap - K entries, each an O(cap) nth_element.
constexpr int selection_cap(int k) { return 2 * k + 32; }

struct QueryState {
  Candidate thr;
  int n;
};

struct Selector {               // one per thread
  Candidate* buf;               // [batch][stride]
  QueryState* st;               // [batch]
  std::int64_t stride;          // slots per query, >= cap
  int k, cap;                   // cap: compact when this many are buffered (> k)
  const std::int64_t* ids;      // the shard's global ids
  bool l2;                      // scores are distances: rank by -distance
  const std::uint32_t* const* masks = nullptr;  // [batch]: query b's row mask, or nullptr (every row)
  const QueryWindow* windows = nullptr;         // [batch]: query b's window, or nullptr (every row)
  std::int64_t* within = nullptr;               // [batch]: rows ahead of a counting window's floor (with windows)

  static bool better_c(const Candidate& x, const Candidate& y) { return better(x, y); }
  void reset(int batch) const {
    for (int b = 0; b < batch; ++b) st[b] = QueryState{pad_candidate(), 0};
    if (within) std::fill(within, within + batch, std::int64_t{0});
  }
  // The current threshold's score in the units of the raw score (distance for l2).
  // A window that counts lowers it to its floor: every row ahead of the floor must be offered.
  float raw_threshold(int b) const {
    float t = st[b].thr.score;
    if (windows && windows[b].count) t = std::min(t, windows[b].floor.score);
    return l2 ? -t : t;
  }
  void offer(int b, std::int64_t row, float s) const {
    if (masks && masks[b] && ((masks[b][row >> 5] >> (row & 31)) & 1u) == 0u) return;  // filtered out
    const Candidate c{l2 ? -s : s, ids[row]};
    if (windows) {
      const QueryWindow& w = windows[b];
      if (!ahead_of_floor(w, c)) return;
      within[b] += w.count;
      if (!better(w.after, c)) return;
    }
    QueryState& q = st[b];
    if (!better(c, q.thr)) return;
    Candidate* a = buf + b * stride;
    a[q.n++] = c;
    if (q.n == cap) {
      std::nth_element(a, a + (k - 1), a + q.n, better_c);
      q.n = k;
      q.thr = a[k - 1];
    }
  }
  // The best K of query b, best first, padded, into out[k].
  void finish(int b, Candidate* out) const {
    Candidate* a = buf + b * stride;
    int n = st[b].n;
    if (n > k) {
      std::nth_element(a, a + (k - 1), a + n, better_c);
      n = k;
    }
    std::sort(a, a + n, better_c);
    std::copy(a, a + n, out);
    std::fill(out + n, out + k, pad_candidate());
  }
};

}  // namespace shardtopk::cpu_detail
