// The GPU filter kernel (src/engine/cuda/kernels/filter_table.cu) against the host evaluation
// (evaluate_mask, itself checked against a brute-force oracle in test_filter): random programs
// over random attribute tables, one and several programs per launch, whole shards and
// block-aligned sub-ranges, every mask word and every block flag compared exactly.
//
// Every test skips, saying so, when no GPU is visible.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/cuda/kernels/filter_table.cuh"
#include "filter_support.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk {
namespace {

bool gpu_visible() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!gpu_visible()) GTEST_SKIP() << "no GPU visible: filter mask kernel test skipped"

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Device buffer of T, freed on scope exit.
template <class T>
struct DeviceBuffer {
  explicit DeviceBuffer(std::size_t n) : n(n) { check(cudaMalloc(&p, std::max<std::size_t>(1, n) * sizeof(T)), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    check(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return h;
  }
  T* p = nullptr;
  std::size_t n;
};

// Runs `programs` over rows on the device; returns masks [programs, words] and flags [programs, blocks].
void run_on_device(const DeviceFilterTable& table, const std::vector<const FilterProgram*>& programs, RowRange rows,
                   std::vector<std::uint32_t>* masks, std::vector<std::uint8_t>* flags, std::int64_t* words,
                   std::int64_t* blocks) {
  *words = filter_mask_words(rows.size()) + 3;  // a stride wider than needed: the extra words stay untouched
  *blocks = (rows.size() + kFilterBlockRows - 1) / kFilterBlockRows + 1;
  const int n = static_cast<int>(programs.size());
  std::vector<std::uint8_t> packed(packed_filter_programs_bytes(programs.data(), n));
  pack_filter_programs(programs.data(), n, packed.data(), packed.size());
  DeviceBuffer<std::uint8_t> d_prog(packed.size());
  check(cudaMemcpy(d_prog.p, packed.data(), packed.size(), cudaMemcpyHostToDevice), "cudaMemcpy programs");
  DeviceBuffer<std::uint32_t> d_masks(static_cast<std::size_t>(n * *words));
  DeviceBuffer<std::uint8_t> d_flags(static_cast<std::size_t>(n * *blocks));
  check(cudaMemset(d_masks.p, 0xab, d_masks.n * 4), "cudaMemset");
  check(cudaMemset(d_flags.p, 0x77, d_flags.n), "cudaMemset");
  launch_filter_mask(table, d_prog.p, n, rows, d_masks.p, *words, d_flags.p, *blocks, nullptr);
  check(cudaDeviceSynchronize(), "kernel");
  *masks = d_masks.get();
  *flags = d_flags.get();
}

void expect_matches_host(const AttributeTable& t, const DeviceFilterTable& dt,
                         const std::vector<const FilterProgram*>& programs, const std::vector<std::string>& names,
                         RowRange rows) {
  std::vector<std::uint32_t> masks;
  std::vector<std::uint8_t> flags;
  std::int64_t words = 0, blocks = 0;
  run_on_device(dt, programs, rows, &masks, &flags, &words, &blocks);
  const std::int64_t need = filter_mask_words(rows.size());
  const std::int64_t need_blocks = blocks - 1;
  for (std::size_t p = 0; p < programs.size(); ++p) {
    std::vector<std::uint32_t> host(static_cast<std::size_t>(need));
    std::vector<std::uint8_t> host_flags(static_cast<std::size_t>(need_blocks));
    evaluate_mask(*programs[p], t, rows, host.data(), host_flags.data(), 1);
    const auto m0 = static_cast<std::ptrdiff_t>(p) * words;
    for (std::int64_t w = 0; w < need; ++w)
      ASSERT_EQ(masks[static_cast<std::size_t>(m0 + w)], host[static_cast<std::size_t>(w)])
          << names[p] << " rows [" << rows.lo << ", " << rows.hi << ") word " << w;
    for (std::int64_t w = need; w < words; ++w)
      ASSERT_EQ(masks[static_cast<std::size_t>(m0 + w)], 0xababababu) << "wrote past its words: " << names[p];
    const auto f0 = static_cast<std::ptrdiff_t>(p) * blocks;
    for (std::int64_t b = 0; b < need_blocks; ++b)
      ASSERT_EQ(flags[static_cast<std::size_t>(f0 + b)], host_flags[static_cast<std::size_t>(b)])
          << names[p] << " block " << b;
    ASSERT_EQ(flags[static_cast<std::size_t>(f0 + need_blocks)], 0x77) << "wrote past its flags: " << names[p];
  }
}

struct Case {
  std::int64_t rows;
  std::uint64_t seed;
  std::int64_t run;
  bool shuffle;
};
std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.rows << " rows, seed " << c.seed << ", runs of " << c.run << (c.shuffle ? ", shuffled ids" : "");
}

class FilterMaskKernel : public ::testing::TestWithParam<Case> {};

TEST_P(FilterMaskKernel, MatchesTheHostForRandomPrograms) {
  SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  const AttributeTable t = test::random_table(c.rows, c.seed, c.run, 5000, c.shuffle);
  DeviceFilterTableStorage storage(t, nullptr);
  test::FilterGenerator gen(t, c.seed + 100, 6);
  std::vector<FilterProgram> programs;
  std::vector<std::string> names;
  for (int i = 0; i < 60; ++i) {
    const test::json f = gen.next();
    programs.push_back(compile_filter(f, t.schema()));
    names.push_back(f.dump().substr(0, 300));
  }
  programs.push_back(parse_filter(R"({"all": []})", t.schema()));
  names.push_back("all []");
  programs.push_back(parse_filter(R"({"any": []})", t.schema()));
  names.push_back("any []");
  std::vector<RowRange> ranges = {{0, t.rows()}};
  if (t.rows() > 2 * kFilterBlockRows) ranges.push_back({kFilterBlockRows, t.rows() - 5});
  // one program per launch
  for (std::size_t i = 0; i < programs.size(); ++i)
    for (RowRange r : ranges) expect_matches_host(t, storage.table(), {&programs[i]}, {names[i]}, r);
  // all of them in one launch
  std::vector<const FilterProgram*> all;
  for (const auto& p : programs) all.push_back(&p);
  for (RowRange r : ranges) expect_matches_host(t, storage.table(), all, names, r);
}

// Boundary sizes (1 row, a word ±1, a block ±1) and larger shards; clustered and scattered ids.
INSTANTIATE_TEST_SUITE_P(Tables, FilterMaskKernel,
                         ::testing::Values(Case{1, 1, 1, true}, Case{31, 2, 10, true}, Case{33, 3, 10, false},
                                           Case{1023, 4, 300, true}, Case{1024, 5, 300, false},
                                           Case{1025, 6, 300, true}, Case{20000, 7, 1500, false},
                                           Case{100000, 8, 5000, true}, Case{100000, 9, 5000, false}));

// Blocks the summaries decide are written without reading a row: with the column values and
// ids pointers null, a program every block's summaries decide still gives the right mask.
TEST(FilterMaskKernelSkips, DecidedBlocksReadNoRows) {
  SKIP_WITHOUT_GPU();
  const AttributeTable t = test::random_table(50000, 77, 4096);  // tenant runs of 4 blocks
  DeviceFilterTableStorage storage(t, nullptr);
  DeviceFilterTable blind = storage.table();
  blind.values = nullptr;
  blind.global_ids = nullptr;
  const FilterProgram p = parse_filter(R"({"any": [{"eq": {"tenant": 3}}, {"range": {"tenant": [9, null]}}]})", t.schema());
  for (std::int64_t b = 0; b < t.blocks(); ++b) ASSERT_NE(analyse_block(p, t, b), BlockVerdict::kSome) << b;
  expect_matches_host(t, blind, {&p}, {"clustered tenant"}, {0, t.rows()});
  expect_matches_host(t, storage.table(), {&p}, {"clustered tenant"}, {0, t.rows()});
}

TEST(FilterMaskKernelArgs, BadArgumentsAreRefused) {
  SKIP_WITHOUT_GPU();
  const AttributeTable t = test::random_table(5000, 3);
  DeviceFilterTableStorage storage(t, nullptr);
  const std::uint8_t* progs = reinterpret_cast<const std::uint8_t*>(16);
  auto err = [&](RowRange r, std::int64_t stride) {
    try {
      launch_filter_mask(storage.table(), progs, 1, r, reinterpret_cast<std::uint32_t*>(16), stride, nullptr, 0, nullptr);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no exception>");
  };
  EXPECT_NE(err({1, 100}, 100).find("rows.lo = 1 is not a multiple of the block size 1024"), std::string::npos);
  EXPECT_NE(err({0, 5001}, 1000).find("outside the table's 5000 rows"), std::string::npos);
  EXPECT_NE(err({0, 5000}, 10).find("mask stride 10 words is less than the 157 words"), std::string::npos);
}

}  // namespace
}  // namespace shardtopk
