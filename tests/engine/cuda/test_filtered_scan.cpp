// kernels/filtered_scan (the batch-1 scan of a filtered query's candidate blocks, dense or
// gathered) against the float64 oracle over exactly the rows that pass (small integers: exact ids
// and scores, ties included) and against the unfiltered scan (kernels/scan_select) of a shard
// holding only those rows: the same ids and the same score bits (DESIGN.md invariants 3, 9), by
// either scan. Filters from none to every row, clustered and scattered, fewer rows than k, deleted
// rows, and a query without a filter in a filtered batch.

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "engine/cuda/kernels/filter_blocks.hpp"
#include "engine/cuda/kernels/filter_table.cuh"
#include "engine/cuda/kernels/filtered_scan.hpp"
#include "filter_support.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk::test {
namespace {

using cuda_detail::FilterState;
using cuda_detail::FilterStats;

/// One program evaluated on the device over a table, and the filtered scan's workspace.
class FilteredRun {
 public:
  FilteredRun(const DeviceShard& shard, const AttributeTable& t, bool l2, int cap, FilterScan path)
      : shard_(shard),
        table_(t, nullptr),
        plan_(cuda_detail::plan_scan_select(shard.dtype, l2, shard.n, shard.dim, shard.dpad, cap, ScanRows::kAuto,
                                            ScanSchedule::kAuto, true, multiprocessors())),
        fplan_(cuda_detail::plan_filtered_scan(plan_, path, multiprocessors())),
        blocks_(t.blocks()),
        words_((t.rows() + 31) / 32),
        scores_(static_cast<std::size_t>(blocks_ * kFilterBlockRows)),
        cids_(static_cast<std::size_t>(blocks_ * kFilterBlockRows)),
        row_list_(static_cast<std::size_t>(t.rows())),
        cand_(static_cast<std::size_t>(cap)),
        flags_(static_cast<std::size_t>(blocks_)),
        cand_blocks_(static_cast<std::size_t>(blocks_)),
        stats_(1),
        masks_(static_cast<std::size_t>(words_)) {
    state_bytes_ = cuda_detail::kHistWords * 4 + 256 + sizeof(cuda_detail::Batch1State);
    state_.allocate(state_bytes_);
  }

  /// Candidates [nq, k] of queries [nq, dim] (host), each searched alone with `prog` (nullptr:
  /// the query has no filter, in a batch whose other queries do), rows dead where `live` says.
  std::vector<Candidate> search(const std::vector<float>& queries, std::int64_t nq, int k, const FilterProgram* prog,
                                const std::vector<std::uint32_t>* live = nullptr) {
    const FilterProgram none = parse_filter(R"({"any": []})", AttributeSchema{});
    const FilterProgram* programs[1] = {prog ? prog : &none};
    std::vector<std::uint8_t> packed(packed_filter_programs_bytes(programs, 1));
    pack_filter_programs(programs, 1, packed.data(), packed.size());
    DeviceArray<std::uint8_t> d_prog(packed);
    const FilterState fs{blocks_, words_, flags_.get(), cand_blocks_.get(), stats_.get(), masks_.get()};
    cuda_detail::launch_block_verdicts(table_.table(), d_prog.get(), 1, fs, nullptr);
    cuda_detail::launch_filter_rows(table_.table(), d_prog.get(), 1, 0, fs, 5, nullptr);
    DeviceArray<std::int32_t> which(std::vector<std::int32_t>{prog ? 0 : -1});
    DeviceArray<std::uint32_t> d_live(live ? *live : std::vector<std::uint32_t>{0u});
    DeviceArray<float> q(queries);
    DeviceArray<Candidate> out(static_cast<std::size_t>(nq) * k, 0xFF);
    cuda_detail::FilteredScanArgs a;
    a.base.shard = shard_.rows.get();
    a.base.ids = shard_.ids.get();
    a.base.k = k;
    a.base.scores = scores_.get();
    a.base.hists = state_.as<std::uint32_t>();
    a.base.count = a.base.hists + cuda_detail::kHistWords;
    a.base.state = reinterpret_cast<cuda_detail::Batch1State*>(reinterpret_cast<char*>(a.base.hists) +
                                                               cuda_detail::kHistWords * 4 + 256);
    a.base.clear_bytes = state_bytes_;
    a.base.cand = cand_.get();
    a.cids = cids_.get();
    a.row_list = row_list_.get();
    a.fs = fs;
    a.query_program = which.get();
    a.live = live ? d_live.get() : nullptr;
    for (std::int64_t i = 0; i < nq; ++i) {
      a.base.query = q.get() + i * shard_.dim;
      a.base.out = out.get() + i * k;
      cuda_detail::filtered_scan_select(plan_, fplan_, a, nullptr);
    }
    return out.download();
  }

 private:
  const DeviceShard& shard_;
  DeviceFilterTableStorage table_;
  cuda_detail::ScanSelectPlan plan_;
  cuda_detail::FilteredScanPlan fplan_;
  std::int64_t blocks_, words_;
  DeviceArray<float> scores_;
  DeviceArray<std::int64_t> cids_;
  DeviceArray<std::int32_t> row_list_;
  DeviceArray<cuda_detail::PoolEntry> cand_;
  DeviceArray<std::uint8_t> flags_;
  DeviceArray<std::int32_t> cand_blocks_;
  DeviceArray<FilterStats> stats_;
  DeviceArray<std::uint32_t> masks_;
  cuda_detail::DeviceBuffer state_;
  std::size_t state_bytes_ = 0;
};

struct Shape {
  std::int64_t n, dim;
  int k;
};

struct ScanCase {
  Dtype dtype;
  Metric metric;
  Shape shape;
  std::string name() const {
    return std::string(dname(dtype)) + "_" + mname(metric) + "_n" + std::to_string(shape.n) + "_d" +
           std::to_string(shape.dim) + "_k" + std::to_string(shape.k);
  }
};
std::ostream& operator<<(std::ostream& os, const ScanCase& c) { return os << c.name(); }

std::vector<ScanCase> scan_cases() {
  // n, dim, k   why
  const Shape shapes[] = {
      {1025, 7, 10},     // a block + 1 row, a partial chunk, 8 rows per warp
      {20000, 100, 50},  // 4 rows per warp (float16) / 2 (float32)
      {30000, 384, 10},  // 2 rows per warp, several blocks per thread block
      {5000, 768, 100},  // the benchmark's row length, k = 100
  };
  std::vector<ScanCase> out;
  for (Dtype dt : {Dtype::kFloat32, Dtype::kFloat16, Dtype::kBFloat16})
    for (Metric m : {Metric::kInnerProduct, Metric::kL2})
      for (const Shape& s : shapes) out.push_back({dt, m, s});
  return out;
}

class FilteredScanExact : public ::testing::TestWithParam<ScanCase> {};

// Every filter, by both scans and the automatic pick: ids and scores equal the oracle's over the
// rows that pass (and live), padding after them, and the bits of the unfiltered scan of a shard
// of exactly those rows.
TEST_P(FilteredScanExact, EqualTheOracleAndTheUnfilteredScanOfThePassingRows) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const ScanCase& c = GetParam();
  const std::int64_t n = c.shape.n, dim = c.shape.dim;
  const int k = c.shape.k;
  const AttributeTable t = random_table(n, 40 + n, 700, 5000, true);  // tenant: runs of 700 rows
  const std::vector<float> rows = small_ints(static_cast<size_t>(n * dim), 41 + dim, -2, 2);
  const DeviceShard shard(rows, n, dim, c.dtype, t.global_ids());
  const std::int64_t nq = 3;
  const std::vector<float> q = small_ints(static_cast<size_t>(nq * dim), 43 + dim, -2, 2);
  const bool l2 = c.metric == Metric::kL2;
  std::vector<std::uint32_t> live((static_cast<size_t>(n) + 31) / 32, ~0u);
  for (std::int64_t r = 0; r < n; r += 7) live[static_cast<size_t>(r / 32)] &= ~(1u << (r % 32));
  struct F {
    std::string json;
    bool with_live;
  };
  const F filters[] = {
      {R"({"eq": {"tenant": 3}})", false},                  // clustered: a run of blocks
      {R"({"range": {"tenant": [2, 20]}})", false},         // clustered, wide
      {R"({"range": {"year": [2010, 2012]}})", false},      // scattered, ~10 %
      {R"({"eq": {"tag": 4}})", true},                      // scattered, with deleted rows
      {R"({"range": {"year": [null, null]}})", false},      // every row: blocks accepted whole
      {R"({"range": {"year": [null, null]}})", true},       // every live row
      {R"({"any": []})", false},                            // no row
      {R"({"ids_in": [5003, 5004, 5900, 6001, 99]})", false},  // fewer rows than k
      {R"({"all": [{"range": {"tenant": [0, 1]}}, {"not": {"eq": {"tag": 2}}}]})", false},
  };
  for (FilterScan path : {FilterScan::kDense, FilterScan::kGathered, FilterScan::kAuto}) {
    FilteredRun run(shard, t, l2, cap_for(std::max(k, 16)), path);
    for (const F& f : filters) {
      const FilterProgram prog = parse_filter(f.json, t.schema());
      std::vector<std::uint32_t> pass(static_cast<size_t>(filter_mask_words(n)));
      evaluate_mask(prog, t, RowRange{0, n}, pass.data(), nullptr, 1);
      std::vector<float> sub_rows;
      std::vector<std::int64_t> sub_ids;
      for (std::int64_t r = 0; r < n; ++r) {
        const bool ok = ((pass[static_cast<size_t>(r / 32)] >> (r % 32)) & 1u) != 0 &&
                        (!f.with_live || ((live[static_cast<size_t>(r / 32)] >> (r % 32)) & 1u) != 0);
        if (!ok) continue;
        sub_ids.push_back(t.global_ids()[static_cast<size_t>(r)]);
        sub_rows.insert(sub_rows.end(), rows.begin() + r * dim, rows.begin() + (r + 1) * dim);
      }
      const std::string what = c.name() + " " + to_string(path) + " " + f.json + (f.with_live ? " (deletes)" : "");
      const std::vector<Candidate> got = run.search(q, nq, k, &prog, f.with_live ? &live : nullptr);
      const auto m = static_cast<std::int64_t>(sub_ids.size());
      expect_exact_candidates(c.metric, sub_rows, m, sub_ids, q, nq, dim, k, got, what);
      if (m == 0) continue;
      const DeviceShard sub(sub_rows, m, dim, c.dtype, sub_ids);
      ScanRun plain(sub, l2, cap_for(std::max(k, 16)));
      expect_same_candidates(got, plain.search(q, nq, k), what + ": against the unfiltered scan of its rows");
    }
    // a query without a filter, in a batch that has filters: every row, the unfiltered scan's bits
    ScanRun plain(shard, l2, cap_for(std::max(k, 16)));
    expect_same_candidates(run.search(q, nq, k, nullptr), plain.search(q, nq, k),
                           c.name() + " " + to_string(path) + ": no filter");
  }
}

INSTANTIATE_TEST_SUITE_P(Gpu, FilteredScanExact, ::testing::ValuesIn(scan_cases()),
                         [](const ::testing::TestParamInfo<ScanCase>& i) { return i.param.name(); });

// More rows tie at the k-th score than the final sort holds, all of them passing a scattered
// filter: the select's slow path over the compact entries takes the smallest ids.
TEST(FilteredScan, MassiveTiesAmongThePassingRows) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const std::int64_t n = 60000, dim = 8;
  const AttributeTable t = random_table(n, 51, 700, 0, true);
  std::vector<float> rows(static_cast<size_t>(n * dim), 1.0f);
  const DeviceShard shard(rows, n, dim, Dtype::kFloat16, t.global_ids());
  const std::vector<float> q(dim, 1.0f);
  const FilterProgram prog = parse_filter(R"({"range": {"tag": [0, 7]}})", t.schema());  // ~80 %: > cap rows tie
  std::vector<std::uint32_t> pass(static_cast<size_t>(filter_mask_words(n)));
  evaluate_mask(prog, t, RowRange{0, n}, pass.data(), nullptr, 1);
  std::vector<std::int64_t> ids;
  for (std::int64_t r = 0; r < n; ++r)
    if ((pass[static_cast<size_t>(r / 32)] >> (r % 32)) & 1u) ids.push_back(t.global_ids()[static_cast<size_t>(r)]);
  std::sort(ids.begin(), ids.end());
  const int k = 100;
  for (FilterScan path : {FilterScan::kDense, FilterScan::kGathered}) {
    FilteredRun run(shard, t, false, cap_for(k), path);
    const std::vector<Candidate> got = run.search(q, 1, k, &prog);
    for (int j = 0; j < k; ++j) {
      EXPECT_EQ(got[static_cast<size_t>(j)].id, ids[static_cast<size_t>(j)]) << to_string(path) << " slot " << j;
      EXPECT_EQ(got[static_cast<size_t>(j)].score, 8.0f);
    }
  }
}

}  // namespace
}  // namespace shardtopk::test
