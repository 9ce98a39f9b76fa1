#include "engine/cpu/scan_spans.hpp"

#include <algorithm>

#include "shardtopk/filter.hpp"

namespace shardtopk::engine_detail {

std::vector<RowRange> scan_spans(const std::uint8_t* flags, std::int64_t blocks, const std::int32_t* query_program,
                                 int batch, std::int64_t rows) {
  std::vector<RowRange> out;
  std::vector<std::int32_t> used;
  for (int q = 0; q < batch; ++q) {
    if (query_program[q] < 0) return rows > 0 ? std::vector<RowRange>{{0, rows}} : out;
    used.push_back(query_program[q]);
  }
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  const std::int64_t nb = std::min(blocks, (rows + kFilterBlockRows - 1) / kFilterBlockRows);
  for (std::int64_t b = 0; b < nb; ++b) {
    bool any = false;
    for (std::int32_t p : used) any = any || flags[static_cast<std::int64_t>(p) * blocks + b] != 0;
    if (!any) continue;
    const std::int64_t lo = b * kFilterBlockRows, hi = std::min(rows, lo + kFilterBlockRows);
    if (!out.empty() && out.back().hi == lo) out.back().hi = hi;
    else out.push_back(RowRange{lo, hi});
  }
  return out;
}

std::vector<RowRange> thread_pieces(const std::vector<RowRange>& spans, int threads, int t, std::int64_t align) {
  std::int64_t total = 0;
  for (const RowRange& s : spans) total += s.size();
  const std::int64_t per = ((total + threads - 1) / threads + align - 1) / align * align;
  const std::int64_t a = std::min(total, t * per), z = std::min(total, a + per);
  std::vector<RowRange> out;
  std::int64_t at = 0;  // logical rows before span s
  for (const RowRange& s : spans) {
    const std::int64_t lo = std::max(a, at), hi = std::min(z, at + s.size());
    if (lo < hi) out.push_back(RowRange{s.lo + (lo - at), s.lo + (hi - at)});
    at += s.size();
  }
  return out;
}

}  // namespace shardtopk::engine_detail
