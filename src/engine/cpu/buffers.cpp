#include "engine/cpu/buffers.hpp"

#include <algorithm>
#include <cstdio>
#include <initializer_list>

#include <unistd.h>

#include "engine/cpu/layout.hpp"
#include "engine/cpu/selector.hpp"
#include "engine/cpu/worker_pool.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk {
namespace cpu_detail {
namespace {

// Saturating arithmetic: absurd limits give UINT64_MAX, never a wrapped small number.
std::uint64_t mul_sat(std::uint64_t a, std::uint64_t b) {
  return (a != 0 && b > UINT64_MAX / a) ? UINT64_MAX : a * b;
}
std::uint64_t mul_sat(std::initializer_list<std::uint64_t> xs) {
  std::uint64_t p = 1;
  for (std::uint64_t x : xs) p = mul_sat(p, x);
  return p;
}

std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : UINT64_MAX;
}

std::string human_bytes(std::uint64_t n) {
  if (n == UINT64_MAX) return "more than 2^64 bytes";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%llu bytes (%.1f %s)", static_cast<unsigned long long>(n), v, units[u]);
  return buf;
}

}  // namespace

std::vector<CpuBuffer> cpu_buffers(std::int64_t rows, std::int64_t dim, Dtype dtype, const EngineLimits& lim,
                                   int threads) {
  const std::uint64_t dp = static_cast<std::uint64_t>(round_up(std::max<std::int64_t>(dim, 1), kLanes));
  const std::uint64_t r2 = static_cast<std::uint64_t>(round_up(std::max<std::int64_t>(rows, 0), 2));
  const std::uint64_t b = static_cast<std::uint64_t>(std::max(lim.batch_max, 0));
  const std::uint64_t k = static_cast<std::uint64_t>(std::max(lim.k_max, 0));
  const std::uint64_t t = static_cast<std::uint64_t>(pool_threads(threads));
  const std::uint64_t cand = sizeof(Candidate);
  const std::uint64_t cap = static_cast<std::uint64_t>(selection_cap(0)) + 2 * k;  // selection_cap(k_max)
  const std::string bk = "[batch_max=" + std::to_string(b) + ", k_max=" + std::to_string(k) + "]";
  return {
      {"shard", "[" + std::to_string(rows) + " rows, " + std::to_string(dp) + " padded dims] " + to_string(dtype),
       mul_sat({r2, dp, static_cast<std::uint64_t>(dtype == Dtype::kFloat32 ? 4 : 2)}), SizedBy::kRows},
      {"ids", "[" + std::to_string(rows) + "] int64", mul_sat(static_cast<std::uint64_t>(std::max<std::int64_t>(rows, 0)), 8), SizedBy::kRows},
      {"padded queries", "[batch_max, padded dim] float32", mul_sat({b, dp, 4}), SizedBy::kBatch},
      {"per-thread lists", "[threads=" + std::to_string(t) + "] x " + bk + " x 16 B", mul_sat({t, b, k, cand}), SizedBy::kBatch},
      {"selection", "[threads=" + std::to_string(t) + ", batch_max, 2*k_max+32] x 16 B", mul_sat({t, b, cap, cand}), SizedBy::kBatch},
      {"selection state", "[threads, batch_max]", mul_sat({t, b, static_cast<std::uint64_t>(sizeof(QueryState))}), SizedBy::kBatch},
      {"filter masks", "[max_filters=" + std::to_string(lim.max_filters) + ", rows/32] x 4 B",
       mul_sat({static_cast<std::uint64_t>(std::max(lim.max_filters, 0)),
                static_cast<std::uint64_t>(filter_mask_words(std::max<std::int64_t>(rows, 0))), 4}),
       SizedBy::kFilters},
      {"filter block flags", "[max_filters=" + std::to_string(lim.max_filters) + ", rows/1024] x 1 B",
       mul_sat(static_cast<std::uint64_t>(std::max(lim.max_filters, 0)),
               static_cast<std::uint64_t>((std::max<std::int64_t>(rows, 0) + kFilterBlockRows - 1) / kFilterBlockRows)),
       SizedBy::kFilters},
      {"live mask", "[rows/32] x 4 B",
       mul_sat(static_cast<std::uint64_t>(filter_mask_words(std::max<std::int64_t>(rows, 0))), 4), SizedBy::kRows},
  };
}

std::uint64_t total_bytes(const std::vector<CpuBuffer>& bufs) {
  std::uint64_t s = 0;
  for (const auto& b : bufs) s = (UINT64_MAX - s < b.bytes) ? UINT64_MAX : s + b.bytes;
  return s;
}

void check_buffers_fit(const std::vector<CpuBuffer>& bufs, const EngineLimits& lim, int ranks_on_host) {
  const int ranks = std::max(ranks_on_host, 1);
  const std::uint64_t total = total_bytes(bufs), phys = physical_memory_bytes();
  const std::uint64_t share = phys == UINT64_MAX ? phys : phys / static_cast<std::uint64_t>(ranks);
  if (total <= share) return;
  const CpuBuffer& big = *std::max_element(bufs.begin(), bufs.end(),
                                           [](const CpuBuffer& a, const CpuBuffer& b) { return a.bytes < b.bytes; });
  // The remedy is the setting that shrinks the largest buffer.
  const std::string remedy =
      big.sized_by == SizedBy::kRows
          ? "the rank holds too many rows (its shard, or storage.capacity_rows slots with storage.dir, as the config "
            "or the storage directory's manifest sets them): start more ranks, on more machines"
      : big.sized_by == SizedBy::kFilters
          ? detail::concat("lower search.max_filters (", lim.max_filters, ")")
          : detail::concat("lower search.batch_max (", lim.batch_max, ") or search.k_max (", lim.k_max, ")");
  throw Error(detail::concat("cpu engine: the rank's buffers need ", human_bytes(total), " in all, the largest the ",
                             big.name, " buffer ", big.shape, " of ", human_bytes(big.bytes),
                             " (`shardtopk plan` shows them as engine_bytes), but this machine has ", human_bytes(phys),
                             " of memory",
                             ranks > 1 ? detail::concat(" for its ", ranks, " ranks: ", human_bytes(share), " each") : "",
                             "; ", remedy));
}

}  // namespace cpu_detail

std::uint64_t cpu_engine_host_bytes(std::int64_t rows, std::int64_t dim, Dtype dtype, const EngineLimits& limits,
                                    int threads) {
  return cpu_detail::total_bytes(cpu_detail::cpu_buffers(rows, dim, dtype, limits, threads));
}

std::uint64_t host_memory_bytes() { return cpu_detail::physical_memory_bytes(); }

void check_cpu_engine_fits(std::int64_t rows, std::int64_t dim, Dtype dtype, const EngineLimits& limits, int threads,
                           std::uint64_t other_bytes, int ranks_on_host) {
  std::vector<cpu_detail::CpuBuffer> bufs = cpu_detail::cpu_buffers(rows, dim, dtype, limits, threads);
  if (other_bytes > 0)
    bufs.push_back({"index", "[queries and candidates of the data path]", other_bytes, cpu_detail::SizedBy::kBatch});
  cpu_detail::check_buffers_fit(bufs, limits, ranks_on_host);
}

}  // namespace shardtopk
