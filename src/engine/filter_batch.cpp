#include "engine/filter_batch.hpp"

#include "shardtopk/error.hpp"

namespace shardtopk::engine_detail {

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

}  // namespace shardtopk::engine_detail
