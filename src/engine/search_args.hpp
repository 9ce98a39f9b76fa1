#pragma once
// The checks both engines make of a search's arguments before reading them. Filter programs are
// taken as given (compiled against the engine's schema where they were admitted).

#include "shardtopk/engine.hpp"

namespace shardtopk::engine_detail {

/// @throws Error when `batch` is outside [0, limits.batch_max] (search.batch_max).
void check_batch(int batch, const EngineLimits& limits);

/// @throws Error when `filters` holds more than `max_filters` programs (search.max_filters), a
///   null array or program, or a query index outside [-1, count) (naming the query and index).
///   `batch`: the queries of the search (the length of filters.query_program).
void check_filter_batch(const FilterBatch& filters, int batch, int max_filters);

/// Engine::search's checks: batch and k in range; for a batch of 1 or more, the query and output
/// buffers given and the filter batch (check_filter_batch). @throws Error naming the value.
void check_search_args(const SearchArgs& args, const EngineLimits& limits);

}  // namespace shardtopk::engine_detail
