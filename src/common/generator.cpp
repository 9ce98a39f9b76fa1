#include "shardtopk/generator.hpp"

#include <algorithm>
#include <thread>
#include <vector>

#include "shardtopk/error.hpp"

namespace shardtopk {

void generate_rows(std::uint64_t seed, std::int64_t first_row, std::int64_t rows, std::int64_t dim, float* out,
                   int threads) {
  SHARDTOPK_EXPECTS(rows >= 0 && dim >= 1 && first_row >= 0, "generate_rows: bad shape rows=", rows, " dim=", dim,
                    " first_row=", first_row);
  if (rows == 0) return;
  SHARDTOPK_EXPECTS(out != nullptr, "generate_rows: no output buffer");
  int nt = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Below ~64k values a thread costs more than it saves.
  nt = static_cast<int>(std::min<std::int64_t>(nt, std::max<std::int64_t>(1, rows * dim / 65536)));
  auto work = [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      float* o = out + r * dim;
      const std::int64_t g = first_row + r;
      for (std::int64_t j = 0; j < dim; ++j) o[j] = generated_value(seed, g, j);
    }
  };
  if (nt == 1) {
    work(0, rows);
    return;
  }
  std::vector<std::thread> pool;
  const std::int64_t per = (rows + nt - 1) / nt;
  for (int t = 0; t < nt; ++t) {
    const std::int64_t r0 = std::min(rows, t * per), r1 = std::min(rows, r0 + per);
    if (r0 < r1) pool.emplace_back(work, r0, r1);
  }
  for (auto& th : pool) th.join();
}

}  // namespace shardtopk
