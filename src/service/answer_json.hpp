#pragma once
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

}  // namespace shardtopk::service
