#include "engine/search_args.hpp"

#include "shardtopk/error.hpp"

namespace shardtopk::engine_detail {

void check_batch(int batch, const EngineLimits& limits) {
  SHARDTOPK_EXPECTS(batch >= 0 && batch <= limits.batch_max, "batch of ", batch, " queries out of range: allowed 0 .. ",
                    limits.batch_max, " (search.batch_max)");
}

void check_filter_batch(const FilterBatch& f, int batch, int max_filters) {
  if (f.count == 0) return;
  SHARDTOPK_EXPECTS(f.count > 0 && f.count <= max_filters, "a batch holds ", f.count,
                    " distinct filters; allowed 0 .. ", max_filters, " (search.max_filters)");
  SHARDTOPK_EXPECTS(f.programs != nullptr && f.query_program != nullptr,
                    "search: a filter batch without programs or query indices");
  for (int m = 0; m < f.count; ++m)
    SHARDTOPK_EXPECTS(f.programs[m] != nullptr, "search: filter program ", m, " of the batch is null");
  for (int q = 0; q < batch; ++q)
    SHARDTOPK_EXPECTS(f.query_program[q] >= -1 && f.query_program[q] < f.count, "search: query ", q,
                      " names filter program ", f.query_program[q], ", outside [-1, ", f.count, ")");
}

void check_search_args(const SearchArgs& a, const EngineLimits& limits) {
  check_batch(a.batch, limits);
  SHARDTOPK_EXPECTS(a.k >= 1 && a.k <= limits.k_max, "k=", a.k, " out of range: allowed 1 .. ", limits.k_max,
                    " (search.k_max)");
  if (a.batch == 0) return;
  SHARDTOPK_EXPECTS(a.queries != nullptr && a.out != nullptr, "search: null query or output buffer");
  check_filter_batch(a.filters, a.batch, limits.max_filters);
}

}  // namespace shardtopk::engine_detail
