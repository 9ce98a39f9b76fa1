// Score-range admission: see admission.hpp for the bound and its derivation.
#include "index/admission.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/log.hpp"
#include "core/parallel.hpp"
#include "io/value_convert.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk {

namespace {

/// The norms of kRows rows at once. float64: (3.4e38)² · 1e7 ≈ 1e84, far from overflow. Four
/// partial sums per row (element d goes to d mod 4, combined as (s0 + s1) + (s2 + s3)): one sum
/// per element is a chain of dependent adds, ~1 µs per 768-element row. Each row keeps its own
/// sums in that order, so its bits do not depend on kRows; the rows' chains are independent and
/// overlap (65,536 float32 rows of 768 on one core of the 2-core build VM, 2026-12-06: 64 ms one
/// row at a time, 52 ms four at a time).
template <int kRows>
void row_norms(const float* const (&x)[kRows], std::int64_t dim, double (&out)[kRows]) {
  double s[kRows][4] = {};
  std::int64_t d = 0;
  for (; d + 4 <= dim; d += 4)
    for (int r = 0; r < kRows; ++r)
      for (int j = 0; j < 4; ++j) s[r][j] += static_cast<double>(x[r][d + j]) * static_cast<double>(x[r][d + j]);
  for (int r = 0; r < kRows; ++r) {
    std::int64_t e = d;
    for (int j = 0; e < dim; ++e, ++j) s[r][j] += static_cast<double>(x[r][e]) * static_cast<double>(x[r][e]);
    out[r] = std::sqrt((s[r][0] + s[r][1]) + (s[r][2] + s[r][3]));
  }
}
constexpr int kNormRows = 4;  // rows shard_norms takes at once

}  // namespace

double row_norm(const float* x, std::int64_t dim) {
  const float* const rows[1] = {x};
  double n[1];
  row_norms(rows, dim, n);
  return n[0];
}

namespace {

/// The largest |x_d| of x [dim] as its bit pattern with the sign cleared (an int32 ≥ 0: signed
/// order = magnitude order; +inf and NaN above every finite value). 16 independent maxima (one
/// accumulator would be a dependent chain); an AVX2 clone where the CPU has it (GCC function
/// multiversioning), SSE2 otherwise.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx2", "default")))
#endif
std::int32_t abs_max_bits(const float* x, std::int64_t dim) {
  std::int32_t m16[16] = {};
  std::int64_t d = 0;
  for (; d + 16 <= dim; d += 16)
    for (int j = 0; j < 16; ++j) {
      std::int32_t u;
      std::memcpy(&u, x + d + j, sizeof u);
      u &= 0x7FFFFFFF;  // non-negative: signed order = magnitude order
      m16[j] = u > m16[j] ? u : m16[j];
    }
  for (int j = 0; d < dim; ++d, ++j) {
    std::int32_t u;
    std::memcpy(&u, x + d, sizeof u);
    u &= 0x7FFFFFFF;
    m16[j] = u > m16[j] ? u : m16[j];
  }
  std::int32_t mx = 0;
  for (int j = 0; j < 16; ++j) mx = m16[j] > mx ? m16[j] : mx;
  return mx;
}

bool larger(const NormSummary& a, const NormSummary& b) {
  if (a.row < 0) return false;
  if (b.row < 0) return true;
  return a.max_norm > b.max_norm || (a.max_norm == b.max_norm && a.row < b.row);
}

}  // namespace

NormSummary shard_norms(const float* data, std::int64_t rows, std::int64_t dim, std::int64_t first_row, int threads) {
  return shard_norms(data, RowFormat::kFloat32, rows, dim, first_row, threads);
}

NormSummary shard_norms(const void* data, RowFormat format, std::int64_t rows, std::int64_t dim,
                        std::int64_t first_row, int threads, bool f16c) {
  auto part = [&](std::int64_t lo, std::int64_t hi) {
    NormSummary s;
    io_detail::RowsAsFloat32 in[kNormRows] = {{data, format, dim, f16c}, {data, format, dim, f16c},
                                              {data, format, dim, f16c}, {data, format, dim, f16c}};
    const auto take = [&](double n, std::int64_t i) {  // in row order: equal norms keep the first
      if (s.row < 0 || n > s.max_norm) s = NormSummary{n, first_row + i};
    };
    std::int64_t i = lo;
    for (; i + kNormRows <= hi; i += kNormRows) {
      const float* const x[kNormRows] = {in[0].row(i), in[1].row(i + 1), in[2].row(i + 2), in[3].row(i + 3)};
      double n[kNormRows];
      row_norms(x, dim, n);
      for (int r = 0; r < kNormRows; ++r) take(n[r], i + r);
    }
    for (; i < hi; ++i) take(row_norm(in[0].row(i), dim), i);
    return s;
  };
  const int nt = range_parts(rows * dim, std::max(1, threads), 1 << 20);  // ≥ 1M values per thread
  std::vector<NormSummary> parts(static_cast<size_t>(nt));
  parallel_ranges(rows, nt, [&](std::int64_t lo, std::int64_t hi, int p) { parts[p] = part(lo, hi); });
  return combine_norms(parts);  // the largest; equal norms: the smaller row, as one pass gives
}

NormSummary combine_norms(const std::vector<NormSummary>& parts) {
  NormSummary best;
  for (const NormSummary& p : parts)
    if (larger(p, best)) best = p;
  return best;
}

void check_corpus_norms(Metric m, const NormSummary& shard, std::int64_t dim, const std::string& label) {
  SHARDTOPK_EXPECTS(dim <= kMaxBoundedDim, label, ": dimension ", dim, " is above ", kMaxBoundedDim,
                    ", the largest for which float32 score overflow is bounded (docs/EXACTNESS.md 'Score range')");
  if (m != Metric::kL2 || shard.row < 0) return;
  const double sq = shard.max_norm * shard.max_norm;
  SHARDTOPK_EXPECTS(sq <= kScoreBound, label, " ", shard.row, " has norm ", shard.max_norm,
                    ": its squared norm ", sq, " exceeds the float32 score bound ", kScoreBound,
                    " (FLT_MAX/2), so no l2 distance to it can be computed without overflow; "
                    "scale the corpus down (docs/EXACTNESS.md 'Score range')");
}

double max_query_norm(Metric m, const NormSummary& corpus) {
  const double inf = std::numeric_limits<double>::infinity();
  if (m == Metric::kCosine || corpus.row < 0) return inf;
  if (m == Metric::kL2) return std::sqrt(kScoreBound) - corpus.max_norm;
  return corpus.max_norm > 0.0 ? kScoreBound / corpus.max_norm : inf;
}

double max_upsert_norm(Metric m) {
  if (m == Metric::kCosine) return std::numeric_limits<double>::infinity();
  return m == Metric::kL2 ? std::sqrt(kScoreBound) / 2.0 : std::sqrt(kScoreBound);
}

void check_upsert_norm(Metric m, const NormSummary& rows) {
  if (rows.row < 0 || !(rows.max_norm > max_upsert_norm(m))) return;
  throw Error(detail::concat(
      "row id ", rows.row, " has norm ", rows.max_norm, ", above ", max_upsert_norm(m),
      ", the largest an upserted row may have under ", to_string(m),
      m == Metric::kL2 ? " (sqrt(FLT_MAX/2) / 2)" : " (sqrt(FLT_MAX/2))",
      ": with it, queries of its own norm could overflow a float32 score and would be refused; scale the vectors "
      "down (docs/EXACTNESS.md 'Score range')"));
}

namespace {

/// The largest score magnitude a query of norm qn can reach (admission.hpp's table).
double reach_of(Metric m, const NormSummary& corpus, double qn) {
  return m == Metric::kL2 ? (qn + corpus.max_norm) * (qn + corpus.max_norm) : qn * corpus.max_norm;
}

/// Throws when a query of norm qn (row b of the batch) could overflow a score.
void check_query_norm(Metric m, const NormSummary& corpus, int b, double qn) {
  const double reach = reach_of(m, corpus, qn);
  if (reach <= kScoreBound) return;
  throw Error(detail::concat(
      "query ", b, " of the batch has norm ", qn, ": with the corpus's largest row norm ", corpus.max_norm, " (id ",
      corpus.row, "), ", m == Metric::kL2 ? "(|q| + max|x|)^2 = " : "|q| * max|x| = ", reach,
      " exceeds the float32 score bound ", kScoreBound,
      " (FLT_MAX/2), so scores could overflow; the largest admissible query norm is ", max_query_norm(m, corpus),
      " (docs/EXACTNESS.md 'Score range')"));
}

}  // namespace

void admit_query_values(Metric m, const NormSummary& corpus, const float* queries, int batch, std::int64_t dim) {
  // One pass: per query the largest |value| as its bit pattern with the sign cleared. Those
  // patterns order like the magnitudes they encode, +inf (0x7F800000) and every NaN above all
  // finite ones, so one integer max per query decides finiteness; its loop has no branch and
  // no dependent float chain, and vectorises (64 × 768 queries: about 2 µs on one x86 core,
  // where float64 norms of every query take about 12 µs).
  constexpr std::int32_t kFiniteMax = 0x7F7FFFFF;  // FLT_MAX's pattern
  const bool ranged = m != Metric::kCosine && corpus.row >= 0;
  // ‖q‖ ≤ √dim · max|q_d|: a query this bound clears cannot overflow a score.
  const double root_dim = std::sqrt(static_cast<double>(dim)) * (1.0 + 0x1p-50);
  const auto cleared = [&](std::int32_t bits) {
    float a;
    std::memcpy(&a, &bits, sizeof a);
    return reach_of(m, corpus, root_dim * a) * (1.0 + 0x1p-50) <= kScoreBound;
  };
  int first_uncleared = batch, first_zero = batch;
  for (int b = 0; b < batch; ++b) {
    const float* x = queries + static_cast<std::int64_t>(b) * dim;
    const std::int32_t mx = abs_max_bits(x, dim);
    if (mx > kFiniteMax)  // the first non-finite value in row-major order: this query's first
      for (std::int64_t d = 0; d < dim; ++d)
        SHARDTOPK_EXPECTS(std::isfinite(x[d]), "query ", b, " of the batch has a non-finite value (", x[d],
                          ") at column ", d);
    if (ranged && first_uncleared == batch && !cleared(mx)) first_uncleared = b;
    if (mx == 0 && first_zero == batch) first_zero = b;  // every value ±0: no direction
  }
  // A cosine query needs a direction (a finite non-zero value has a non-zero float64 norm).
  SHARDTOPK_EXPECTS(m != Metric::kCosine || first_zero == batch, "query ", first_zero,
                    " of the batch has zero norm and cannot be scored by cosine similarity");
  // Every value is finite. Queries the bound did not clear (rare: from first_uncleared on) get
  // their float64 norm, which decides exactly and is what the error reports.
  for (int b = first_uncleared; b < batch; ++b) {
    const float* x = queries + static_cast<std::int64_t>(b) * dim;
    if (!cleared(abs_max_bits(x, dim))) check_query_norm(m, corpus, b, row_norm(x, dim));
  }
}

// The largest float64 norm over the live rows of every rank, as stored (read back from the
// engine: under float16/bfloat16 the stored values, whose norms are what scores are computed
// from), named by id. Collective. nullopt when some rank could not read its rows: the bound
// in force is then kept, which is still an upper bound.
std::optional<NormSummary> live_row_norms(Engine& engine, Communicator& comm, const std::vector<std::uint8_t>& live,
                                          std::int64_t dim) {
  struct Wire {
    double norm;
    std::int64_t id;
    std::int64_t ok;
  };
  Wire mine{0.0, -1, 1};
  try {
    const auto& gids = engine.attribute_table().global_ids();
    std::vector<std::int64_t> slots;
    std::vector<float> rows;
    auto flush = [&] {
      const std::int64_t m = static_cast<std::int64_t>(slots.size());
      rows.resize(static_cast<std::size_t>(m * dim));
      engine.read_rows(slots.data(), m, rows.data());
      for (std::int64_t i = 0; i < m; ++i) {
        const double n = row_norm(rows.data() + i * dim, dim);
        const std::int64_t id = gids[static_cast<std::size_t>(slots[static_cast<std::size_t>(i)])];
        if (mine.id < 0 || n > mine.norm || (n == mine.norm && id < mine.id)) mine = Wire{n, id, 1};
      }
      slots.clear();
    };
    for (std::size_t s = 0; s < live.size(); ++s) {
      if (live[s]) slots.push_back(static_cast<std::int64_t>(s));
      if (slots.size() == 4096) flush();
    }
    if (!slots.empty()) flush();
  } catch (const std::exception& e) {
    spdlog::warn("rank {}: measuring the live rows' norms: {}", comm.rank(), e.what());
    mine = Wire{0.0, -1, 0};
  }
  std::vector<Wire> all(static_cast<std::size_t>(comm.world_size()));
  comm.allgather(&mine, all.data(), sizeof mine);
  std::vector<NormSummary> parts;
  for (const Wire& w : all) {
    if (!w.ok) return std::nullopt;
    parts.push_back(NormSummary{w.norm, w.id});
  }
  return combine_norms(parts);
}

void allgather_norms(Communicator& comm, Metric m, IngestStats* stats) {
  struct Wire {
    double norm;
    std::int64_t row;
  };
  const Wire mine{stats->max_row_norm, stats->max_row_norm_row};
  std::vector<Wire> all(static_cast<size_t>(comm.world_size()));
  comm.allgather(&mine, all.data(), sizeof(Wire));
  std::vector<NormSummary> parts;
  for (const Wire& w : all) parts.push_back(NormSummary{w.norm, w.row});
  const NormSummary c = combine_norms(parts);
  stats->max_row_norm = c.max_norm;
  stats->max_row_norm_row = c.row;
  if (comm.rank() == 0)
    spdlog::debug("score range: largest corpus row norm {:.6g} (id {}); {} admits queries of norm up to {:.6g} "
                  "(bound B = FLT_MAX/2)",
                  c.max_norm, c.row, to_string(m), max_query_norm(m, c));
}

}  // namespace shardtopk
