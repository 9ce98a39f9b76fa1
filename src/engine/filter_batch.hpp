#pragma once
// The checks both engines make of a search's FilterBatch before reading it. The programs
// themselves are taken as given (compiled against the engine's schema where they were admitted).

#include "shardtopk/engine.hpp"

namespace shardtopk::engine_detail {

/// @throws Error when `filters` holds more than `max_filters` programs (search.max_filters), a
///   null array or program, or a query index outside [-1, count) (naming the query and index).
///   `batch`: the queries of the search (the length of filters.query_program).
void check_filter_batch(const FilterBatch& filters, int batch, int max_filters);

}  // namespace shardtopk::engine_detail
