// The GPU filter kernels (src/engine/cuda/kernels/filter_blocks.cu) against the host evaluation
// (analyse_block, evaluate_mask; themselves checked against a brute-force oracle in test_filter):
// random programs over random attribute tables, one and several programs per launch, every block
// flag, every candidate list, every passing count and every mask bit the flags send a reader to,
// compared exactly; a large ids_in list, by the rows kernel and through the id index (ids in
// order, shuffled, repeated, rewritten); blocks the bounds decide read no row; the chunk activity
// of a batched schedule.
//
// Every test skips, saying so, when no GPU is visible.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/cuda/kernels/filter_blocks.hpp"
#include "engine/cuda/kernels/filter_table.cuh"
#include "engine/cuda/kernels/id_rows.hpp"
#include "filter_support.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk {
namespace {

using cuda_detail::FilterState;
using cuda_detail::FilterStats;

bool gpu_visible() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!gpu_visible()) GTEST_SKIP() << "no GPU visible: filter block kernel test skipped"

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Device buffer of T, freed on scope exit.
template <class T>
struct DeviceBuffer {
  explicit DeviceBuffer(std::size_t n, int byte = 0) : n(n) {
    check(cudaMalloc(&p, std::max<std::size_t>(1, n) * sizeof(T)), "cudaMalloc");
    check(cudaMemset(p, byte, std::max<std::size_t>(1, n) * sizeof(T)), "cudaMemset");
  }
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    check(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return h;
  }
  T* p = nullptr;
  std::size_t n;
};

int sms() {
  int n = 0;
  check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
  return n;
}

// The kernels' results for `programs` over a table (poisoned buffers: what a kernel should not
// write stands out).
struct DeviceResult {
  std::int64_t blocks = 0, words = 0;
  std::vector<std::uint8_t> flags;  // [n, blocks]
  std::vector<std::int32_t> cand;   // [n, blocks]
  std::vector<FilterStats> stats;   // [n]
  std::vector<std::uint32_t> masks; // [n, words]
};

// The masks of `programs` by the rows kernel (single, grid) or, with `index`, program `single`
// (an ids_in list) through the id index.
DeviceResult run_on_device(const DeviceFilterTable& table, const std::vector<const FilterProgram*>& programs,
                           int single, int grid, const cuda_detail::IdRowView* index = nullptr) {
  DeviceResult r;
  r.blocks = table.blocks;
  r.words = (table.rows + 31) / 32;
  const int n = static_cast<int>(programs.size());
  std::vector<std::uint8_t> packed(packed_filter_programs_bytes(programs.data(), n));
  pack_filter_programs(programs.data(), n, packed.data(), packed.size());
  DeviceBuffer<std::uint8_t> d_prog(packed.size());
  check(cudaMemcpy(d_prog.p, packed.data(), packed.size(), cudaMemcpyHostToDevice), "cudaMemcpy programs");
  DeviceBuffer<std::uint8_t> flags(static_cast<std::size_t>(n * r.blocks), 0x77);
  DeviceBuffer<std::int32_t> cand(static_cast<std::size_t>(n * r.blocks), 0xab);
  DeviceBuffer<FilterStats> stats(static_cast<std::size_t>(n), 0xcd);
  DeviceBuffer<std::uint32_t> masks(static_cast<std::size_t>(n * r.words), 0xab);
  const FilterState fs{r.blocks, r.words, flags.p, cand.p, stats.p, masks.p};
  cuda_detail::launch_block_verdicts(table, d_prog.p, n, fs, nullptr);
  if (index)
    cuda_detail::launch_id_list_rows(table, *index, d_prog.p, n, single,
                                     programs[static_cast<std::size_t>(single)]->ops()[0].count, fs, nullptr);
  else
    cuda_detail::launch_filter_rows(table, d_prog.p, n, single, fs, grid, nullptr);
  check(cudaDeviceSynchronize(), "kernels");
  r.flags = flags.get();
  r.cand = cand.get();
  r.stats = stats.get();
  r.masks = masks.get();
  return r;
}

// Program p of a device result against the host: flags equal evaluate_mask's (0 / 1 / 2 by the
// rows), mask bits equal in blocks flagged 1, the candidate list holds exactly the blocks
// analyse_block does not rule out, pass_rows counts the passing rows.
void expect_program(const AttributeTable& t, const FilterProgram& prog, const DeviceResult& d, std::size_t p,
                    const std::string& name) {
  std::vector<std::uint32_t> host(static_cast<std::size_t>(filter_mask_words(t.rows())));
  std::vector<std::uint8_t> host_flags(static_cast<std::size_t>(t.blocks()));
  evaluate_mask(prog, t, RowRange{0, t.rows()}, host.data(), host_flags.data(), 1);
  std::vector<std::int32_t> want_cand;
  std::uint64_t passing = 0;
  for (std::uint32_t w : host) passing += static_cast<std::uint64_t>(__builtin_popcount(w));
  for (std::int64_t b = 0; b < t.blocks(); ++b) {
    if (analyse_block(prog, t, b) != BlockVerdict::kNone) want_cand.push_back(static_cast<std::int32_t>(b));
    const std::uint8_t f = d.flags[p * static_cast<std::size_t>(d.blocks) + static_cast<std::size_t>(b)];
    ASSERT_EQ(f, host_flags[static_cast<std::size_t>(b)]) << name << " block " << b;
    if (f != 1) continue;
    for (std::int64_t w = b * 32; w < std::min<std::int64_t>((b + 1) * 32, d.words); ++w)
      ASSERT_EQ(d.masks[p * static_cast<std::size_t>(d.words) + static_cast<std::size_t>(w)],
                host[static_cast<std::size_t>(w)])
          << name << " block " << b << " word " << w;
  }
  const FilterStats& s = d.stats[p];
  ASSERT_EQ(s.cand_blocks, want_cand.size()) << name;
  std::vector<std::int32_t> got(d.cand.begin() + static_cast<std::ptrdiff_t>(p * d.blocks),
                                d.cand.begin() + static_cast<std::ptrdiff_t>(p * d.blocks + s.cand_blocks));
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want_cand) << name;
  EXPECT_EQ(s.pass_rows, passing) << name;
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

class FilterBlocksKernel : public ::testing::TestWithParam<Case> {};

TEST_P(FilterBlocksKernel, MatchTheHostForRandomPrograms) {
  SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  const AttributeTable t = test::random_table(c.rows, c.seed, c.run, 5000, c.shuffle);
  DeviceFilterTableStorage storage(t, nullptr);
  test::FilterGenerator gen(t, c.seed + 100, 6);
  std::vector<FilterProgram> programs;
  std::vector<std::string> names;
  for (int i = 0; i < 40; ++i) {
    const test::json f = gen.next();
    programs.push_back(compile_filter(f, t.schema()));
    names.push_back(f.dump().substr(0, 300));
  }
  programs.push_back(parse_filter(R"({"all": []})", t.schema()));
  names.push_back("all []");
  programs.push_back(parse_filter(R"({"any": []})", t.schema()));
  names.push_back("any []");
  const int grid = 3;  // fewer thread blocks than candidate blocks: each walks several
  // one program per launch: its candidate list alone
  for (std::size_t i = 0; i < programs.size(); ++i) {
    const DeviceResult d = run_on_device(storage.table(), {&programs[i]}, 0, grid);
    expect_program(t, programs[i], d, 0, names[i]);
  }
  // all of them in one launch: every block with every program, and each program's list alone
  std::vector<const FilterProgram*> all;
  for (const auto& p : programs) all.push_back(&p);
  const DeviceResult d = run_on_device(storage.table(), all, -1, grid);
  for (std::size_t i = 0; i < programs.size(); ++i) expect_program(t, programs[i], d, i, names[i]);
  for (int single : {0, 7, static_cast<int>(programs.size()) - 1}) {
    const DeviceResult one = run_on_device(storage.table(), all, single, grid);
    expect_program(t, programs[static_cast<std::size_t>(single)], one, static_cast<std::size_t>(single),
                   names[static_cast<std::size_t>(single)]);
  }
}

// Boundary sizes (1 row, a word ±1, a block ±1) and larger shards; clustered and scattered ids.
INSTANTIATE_TEST_SUITE_P(Tables, FilterBlocksKernel,
                         ::testing::Values(Case{1, 1, 1, true}, Case{31, 2, 10, true}, Case{33, 3, 10, false},
                                           Case{1023, 4, 300, true}, Case{1024, 5, 300, false},
                                           Case{1025, 6, 300, true}, Case{20000, 7, 1500, false},
                                           Case{100000, 8, 5000, true}, Case{100000, 9, 5000, false}));

// ids_in over a list far longer than a block (each block searches only the members inside its
// id bounds), with ids in order (most blocks ruled out or accepted by their bounds) and
// shuffled (every block open).
TEST(FilterBlocksKernelIds, LongIdListsMatchTheHost) {
  SKIP_WITHOUT_GPU();
  for (bool shuffle : {false, true}) {
    const AttributeTable t = test::random_table(70000, 21, 700, 1000, shuffle);
    DeviceFilterTableStorage storage(t, nullptr);
    std::mt19937_64 rng(22);
    std::vector<std::int64_t> ids;
    for (int i = 0; i < 200000; ++i) ids.push_back(static_cast<std::int64_t>(rng() % 200000));  // half are no row's
    for (std::int64_t id = 20000; id < 30000; ++id) ids.push_back(id);  // a run: whole blocks when in order
    test::json f = {{"ids_in", ids}};
    const FilterProgram in = compile_filter(f, t.schema());
    const FilterProgram not_in = compile_filter(test::json{{"ids_not_in", ids}}, t.schema());
    const FilterProgram mixed =
        compile_filter(test::json{{"all", {f, {{"range", {{"year", {2005, 2020}}}}}}}}, t.schema());
    for (const FilterProgram* p : {&in, &not_in, &mixed}) {
      const DeviceResult d = run_on_device(storage.table(), {p}, 0, 7);
      expect_program(t, *p, d, 0, shuffle ? "shuffled ids" : "ids in order");
    }
  }
}

// Gives rows slots[i] the global id ids[i], keeping their attribute values.
void rewrite_ids(AttributeTable& t, const std::vector<std::int64_t>& slots, const std::vector<std::int64_t>& ids) {
  std::vector<std::vector<std::int64_t>> ints(static_cast<std::size_t>(t.columns()));
  std::vector<std::vector<double>> reals(static_cast<std::size_t>(t.columns()));
  std::vector<const void*> values;
  for (int c = 0; c < t.columns(); ++c) {
    const AttributeColumn& col = t.column(c);
    for (std::int64_t r : slots) {
      if (col.type == AttributeType::kInt64) ints[static_cast<std::size_t>(c)].push_back(col.ints[static_cast<std::size_t>(r)]);
      else reals[static_cast<std::size_t>(c)].push_back(col.reals[static_cast<std::size_t>(r)]);
    }
    values.push_back(col.type == AttributeType::kInt64 ? static_cast<const void*>(ints[static_cast<std::size_t>(c)].data())
                                                       : static_cast<const void*>(reals[static_cast<std::size_t>(c)].data()));
  }
  t.write_rows(slots.data(), static_cast<std::int64_t>(slots.size()), ids.data(), values.data());
}

// ids_in lists resolved through the id index (the shard's ids sorted on the device) give the
// rows kernel's flags, masks and counts: ids in order (whole blocks decided by their bounds),
// shuffled (every block open), ids held by several rows (dead slots beside live ones), lists of
// one id to 210,000 (most absent), and again after rows are rewritten and the index rebuilt.
TEST(FilterBlocksKernelIds, IdIndexMatchesTheHost) {
  SKIP_WITHOUT_GPU();
  for (int layout = 0; layout < 3; ++layout) {
    AttributeTable t = test::random_table(70000, 41 + layout, 700, 1000, layout == 1);
    if (layout == 2) {  // every id held by 1 to 3 rows, in no order
      std::vector<std::int64_t> slots, ids;
      std::mt19937_64 rng(43);
      for (std::int64_t r = 0; r < t.rows(); r += 2) {
        slots.push_back(r);
        ids.push_back(1000 + static_cast<std::int64_t>(rng() % 30000));
      }
      rewrite_ids(t, slots, ids);
    }
    DeviceFilterTableStorage storage(t, nullptr);
    cuda_detail::IdRowIndex index;
    ASSERT_TRUE(index.build(storage.table(), nullptr));
    check(cudaDeviceSynchronize(), "index");
    ASSERT_EQ(index.view().n, t.rows());
    std::mt19937_64 rng(44);
    std::vector<std::vector<std::int64_t>> lists = {{1000}, {}, {}, {}};
    for (int i = 0; i < 5000; ++i) lists[1].push_back(static_cast<std::int64_t>(rng() % 80000));
    for (int i = 0; i < 200000; ++i) lists[2].push_back(static_cast<std::int64_t>(rng() % 200000));  // half no row's
    for (std::int64_t id = 20000; id < 30000; ++id) lists[2].push_back(id);  // a run: whole blocks when in order
    for (std::int64_t id = 1000; id < 71000; ++id) lists[3].push_back(id);  // every row's id
    for (int round = 0; round < 2; ++round) {
      for (const auto& list : lists) {
        const FilterProgram in = compile_filter(test::json{{"ids_in", list}}, t.schema());
        ASSERT_TRUE(cuda_detail::is_id_list_program(in));
        const cuda_detail::IdRowView v = index.view();
        const std::string name = "layout " + std::to_string(layout) + ", round " + std::to_string(round) + ", " +
                                 std::to_string(list.size()) + " ids";
        expect_program(t, in, run_on_device(storage.table(), {&in}, 0, 0, &v), 0, name);
        // second of three programs: the kernels address program 1's flags, list and mask
        const FilterProgram other = parse_filter(R"({"eq": {"tag": 3}})", t.schema());
        expect_program(t, in, run_on_device(storage.table(), {&other, &in, &other}, 1, 0, &v), 1, name + ", program 1");
      }
      // rewrite a third of the rows' ids (some to ids already held), then rebuild the index
      std::vector<std::int64_t> slots, ids;
      for (std::int64_t r = 0; r < t.rows(); r += 3) {
        slots.push_back(r);
        ids.push_back(500 + static_cast<std::int64_t>(rng() % 90000));
      }
      rewrite_ids(t, slots, ids);
      storage.update_rows(t, RowRange{0, t.rows()}, nullptr);
      ASSERT_TRUE(index.build(storage.table(), nullptr));
    }
  }
  EXPECT_FALSE(cuda_detail::is_id_list_program(compile_filter(test::json{{"ids_not_in", {1, 2}}}, test::random_table(10, 1).schema())));
}

// Blocks the summaries decide are written without reading a row: with the column values and
// ids pointers null, a program every block's summaries decide still gives the right flags.
TEST(FilterBlocksKernelSkips, DecidedBlocksReadNoRows) {
  SKIP_WITHOUT_GPU();
  const AttributeTable t = test::random_table(50000, 77, 4096);  // tenant runs of 4 blocks
  DeviceFilterTableStorage storage(t, nullptr);
  DeviceFilterTable blind = storage.table();
  blind.values = nullptr;
  blind.global_ids = nullptr;
  const FilterProgram p = parse_filter(R"({"any": [{"eq": {"tenant": 3}}, {"range": {"tenant": [9, null]}}]})", t.schema());
  for (std::int64_t b = 0; b < t.blocks(); ++b) ASSERT_NE(analyse_block(p, t, b), BlockVerdict::kSome) << b;
  expect_program(t, p, run_on_device(blind, {&p}, 0, 2), 0, "clustered tenant, blind");
  expect_program(t, p, run_on_device(storage.table(), {&p}, 0, 2), 0, "clustered tenant");
}

// The chunk activity of a batched schedule: chunk c of program p is active exactly when one of
// the blocks its rows touch keeps a passing row.
TEST(FilterBlocksKernelChunks, ActivityFollowsTheFlags) {
  SKIP_WITHOUT_GPU();
  const AttributeTable t = test::random_table(40000, 31, 2500);  // tenant runs of 2.4 blocks
  DeviceFilterTableStorage storage(t, nullptr);
  std::vector<FilterProgram> programs;
  for (const char* f : {R"({"eq": {"tenant": 3}})", R"({"range": {"tenant": [10, 11]}})", R"({"eq": {"tenant": 99}})",
                        R"({"range": {"year": [2010, 2011]}})"})
    programs.push_back(parse_filter(f, t.schema()));
  std::vector<const FilterProgram*> all;
  for (const auto& p : programs) all.push_back(&p);
  const int n = static_cast<int>(all.size());
  std::vector<std::uint8_t> packed(packed_filter_programs_bytes(all.data(), n));
  pack_filter_programs(all.data(), n, packed.data(), packed.size());
  DeviceBuffer<std::uint8_t> d_prog(packed.size());
  check(cudaMemcpy(d_prog.p, packed.data(), packed.size(), cudaMemcpyHostToDevice), "cudaMemcpy programs");
  const std::int64_t blocks = t.blocks(), words = (t.rows() + 31) / 32;
  DeviceBuffer<std::uint8_t> flags(static_cast<std::size_t>(n * blocks));
  DeviceBuffer<std::int32_t> cand(static_cast<std::size_t>(n * blocks));
  DeviceBuffer<FilterStats> stats(static_cast<std::size_t>(n));
  DeviceBuffer<std::uint32_t> masks(static_cast<std::size_t>(n * words));
  const FilterState fs{blocks, words, flags.p, cand.p, stats.p, masks.p};
  cuda_detail::launch_block_verdicts(storage.table(), d_prog.p, n, fs, nullptr);
  cuda_detail::launch_filter_rows(storage.table(), d_prog.p, n, -1, fs, sms(), nullptr);
  // chunks of uneven sizes, not on block bounds
  std::vector<std::int64_t> rows = {0, 100, 1500, 5000, 9000, 20000, 20001, 33333, t.rows()};
  const int chunks = static_cast<int>(rows.size()) - 1;
  DeviceBuffer<std::int64_t> d_rows(rows.size());
  check(cudaMemcpy(d_rows.p, rows.data(), rows.size() * 8, cudaMemcpyHostToDevice), "cudaMemcpy rows");
  DeviceBuffer<std::uint8_t> act(static_cast<std::size_t>(n * chunks), 0x55);
  cuda_detail::launch_chunk_activity(fs, n, d_rows.p, chunks, act.p, nullptr);
  check(cudaDeviceSynchronize(), "kernels");
  const std::vector<std::uint8_t> got = act.get();
  for (int p = 0; p < n; ++p) {
    std::vector<std::uint8_t> hf(static_cast<std::size_t>(blocks));
    std::vector<std::uint32_t> hm(static_cast<std::size_t>(words));
    evaluate_mask(programs[static_cast<std::size_t>(p)], t, RowRange{0, t.rows()}, hm.data(), hf.data(), 1);
    for (int c = 0; c < chunks; ++c) {
      bool any = false;
      for (std::int64_t b = rows[c] / kFilterBlockRows; b <= (rows[c + 1] - 1) / kFilterBlockRows; ++b)
        any = any || hf[static_cast<std::size_t>(b)] != 0;
      EXPECT_EQ(got[static_cast<std::size_t>(p * chunks + c)], any ? 1 : 0) << "program " << p << " chunk " << c;
    }
  }
}

TEST(FilterBlocksKernelArgs, BadArgumentsAreRefused) {
  SKIP_WITHOUT_GPU();
  const AttributeTable t = test::random_table(5000, 3);
  DeviceFilterTableStorage storage(t, nullptr);
  const std::uint8_t* progs = reinterpret_cast<const std::uint8_t*>(16);
  auto err = [&](int n, int single, int grid, std::int64_t words) {
    FilterState fs;
    fs.blocks = t.blocks();
    fs.mask_words = words;
    fs.masks = reinterpret_cast<std::uint32_t*>(16);
    try {
      cuda_detail::launch_filter_rows(storage.table(), progs, n, single, fs, grid, nullptr);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no exception>");
  };
  EXPECT_NE(err(2, 2, 4, 157).find("program 2 outside -1 .. 1"), std::string::npos);
  EXPECT_NE(err(2, 0, 0, 157).find("grid of 0 blocks"), std::string::npos);
  EXPECT_NE(err(2, 0, 4, 10).find("mask of 10 words for 5000 rows"), std::string::npos);
}

}  // namespace
}  // namespace shardtopk
