#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "shardtopk/search_batch.hpp"
// The JSON answer of a search, written with std::to_chars: ids as integers, scores as the
// shortest decimal that reads back as the same float32 (so a client that parses a score as
// float32, or as a double and rounds it to float32, gets exactly the binary route's bits; the
// two values for which the double's rounding would not, ±7.038531e-26, get 9 digits).
#include <cstdint>
#include <string>
#include <string_view>

namespace shardtopk::service {

/// Appends {"ids":[[...],...],"metric":"<metric>","scores":[[...],...],"took_ms":<took_ms>} to
/// `out`: one list per query, query q holding its first counts[q] results (ids[q·k + r],
/// scores[q·k + r], best first; the padding after them is not written). A score always has a
/// '.' or an exponent (3 is written 3.0), so it reads back as a JSON float.
/// @param[in] ids    [nq, k] int64
/// @param[in] scores [nq, k] float32
/// @param[in] counts [nq], each in 0 .. k
void write_search_json(std::string& out, const std::int64_t* ids, const float* scores, const std::int32_t* counts,
                       int nq, int k, std::string_view metric, double took_ms);

/// A search's answer with what proves it (the fields of docs/SERVING.md "Ranges, pages and ranks").
struct OrderAnswer {
  const std::int64_t* ids = nullptr;    ///< [nq, k]
  const float* scores = nullptr;        ///< [nq, k] reported units
  const std::int32_t* counts = nullptr; ///< [nq] real results
  const QueryStats* stats = nullptr;    ///< [nq], or nullptr: the request had no bound
  int nq = 0, k = 0;
  bool filtered = false;                ///< rows_passing is written (the request has a filter)
  bool count_only = false;              ///< kth_score and next are left out
  std::uint64_t applied_seq = 0;
};

/// Replaces the closing brace of a write_search_json object in `out` with per-query lists:
/// "kth_score" (the last result's score, null when none), "applied_seq"; with stats, "total"
/// (rows within the bound), "rows_scanned", "rows_passing" (filtered requests), and "next" (the
/// last result's [score, id] when the page is full, null at the end: the next page's
/// search_after).
void write_order_json(std::string& out, const OrderAnswer& a);

/// Appends {"applied_seq":<seq>,"metric":"<metric>","ranks":[...],"scores":[...],"took_ms":<ms>}
/// to `out`: the answer of /v1/rank, one entry per requested id in the request's order; scores
/// written as write_search_json's.
/// @param[in] ranks  [n] int64, 1-based
/// @param[in] scores [n] float32, reported units
void write_rank_json(std::string& out, const std::int64_t* ranks, const float* scores, int n, std::string_view metric,
                     std::uint64_t applied_seq, double took_ms);

}  // namespace shardtopk::service
