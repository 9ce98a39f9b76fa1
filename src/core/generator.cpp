#include "shardtopk/generator.hpp"

#include "core/parallel.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk {

void generate_rows(std::uint64_t seed, std::int64_t first_row, std::int64_t rows, std::int64_t dim, float* out,
                   int threads) {
  SHARDTOPK_EXPECTS(rows >= 0 && dim >= 1 && first_row >= 0, "generate_rows: bad shape rows=", rows, " dim=", dim,
                    " first_row=", first_row);
  if (rows == 0) return;
  SHARDTOPK_EXPECTS(out != nullptr, "generate_rows: no output buffer");
  // threads ≤ 0: every core; at least ~64k values per thread (fewer cost more than they save)
  parallel_ranges(rows, range_parts(rows * dim, threads, 65536), [&](std::int64_t r0, std::int64_t r1, int) {
    for (std::int64_t r = r0; r < r1; ++r) {
      float* o = out + r * dim;
      const std::int64_t g = first_row + r;
      for (std::int64_t j = 0; j < dim; ++j) o[j] = generated_value(seed, g, j);
    }
  });
}

}  // namespace shardtopk
