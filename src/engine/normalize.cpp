#include <cmath>

#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk {

void normalize_rows(float* data, std::int64_t rows, std::int64_t dim, std::int64_t first_row, const char* label) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float* x = data + r * dim;
    double ss = 0.0;
    for (std::int64_t d = 0; d < dim; ++d) ss += static_cast<double>(x[d]) * static_cast<double>(x[d]);
    const double norm = std::sqrt(ss);
    SHARDTOPK_EXPECTS(norm > 0.0, label, " ", first_row + r,
                      " has zero norm and cannot be scored by cosine similarity");
    const double inv = 1.0 / norm;
    for (std::int64_t d = 0; d < dim; ++d) x[d] = static_cast<float>(static_cast<double>(x[d]) * inv);
  }
}

}  // namespace shardtopk
