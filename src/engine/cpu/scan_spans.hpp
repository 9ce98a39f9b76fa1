#pragma once
// Which rows a filtered batch makes a host engine scan: the runs of summary blocks that some query
// of the batch may return a row of, and their split among threads. Blocks every query's filter
// rules out are never visited (a 1 % clustered filter reads about 1 % of the shard).

#include <cstdint>
#include <vector>

#include "shardtopk/shard_plan.hpp"

namespace shardtopk::engine_detail {

/// Runs of blocks of kFilterBlockRows rows within [0, rows), ascending, that a batch must scan:
/// block b is in when a query without a filter (query_program[q] < 0) is in the batch, or when
/// flags[p · blocks + b] ≠ 0 (evaluate_mask's block flags of program p) for a program p a query
/// uses. flags [programs, blocks], query_program [batch].
std::vector<RowRange> scan_spans(const std::uint8_t* flags, std::int64_t blocks, const std::int32_t* query_program,
                                 int batch, std::int64_t rows);

/// Thread t's pieces of `spans` when their rows are split into `threads` contiguous shares whose
/// cuts fall on multiples of `align` rows from the start of each span (spans start on such
/// multiples): each row in exactly one thread's pieces.
std::vector<RowRange> thread_pieces(const std::vector<RowRange>& spans, int threads, int t, std::int64_t align);

}  // namespace shardtopk::engine_detail
