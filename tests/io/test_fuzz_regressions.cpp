// Every input the fuzzers (fuzz/) found that broke shardtopk's contract, replayed through the
// same harness code in every build: it must end with shardtopk::Error or success, promptly (the
// harness aborts on any other outcome, fuzz_hdf5_differential also when the reader and libhdf5
// disagree). fuzz/regressions/{config,hdf5,hdf5_diff}/ hold the inputs;
// fuzz/regressions/libhdf5/ holds inputs that crash libhdf5 itself and are not replayed here
// (fuzz/README.md).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#define LLVMFuzzerTestOneInput fuzz_config_one
#include "../../fuzz/fuzz_config.cpp"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_hdf5_one
#include "../../fuzz/fuzz_hdf5_meta.cpp"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_hdf5_diff_one
#define LLVMFuzzerInitialize fuzz_hdf5_diff_init
#include "../../fuzz/fuzz_hdf5_differential.cpp"
#undef LLVMFuzzerInitialize
#undef LLVMFuzzerTestOneInput

#include "core/half.hpp"
#include "shardtopk/corpus_io.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

std::vector<std::string> inputs(const std::string& sub) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(std::string(SHARDTOPK_SOURCE_DIR) + "/fuzz/regressions/" + sub))
    if (e.is_regular_file()) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void replay(const std::string& sub, int (*one)(const std::uint8_t*, std::size_t)) {
  const auto files = inputs(sub);
  ASSERT_FALSE(files.empty()) << "no inputs in fuzz/regressions/" << sub;
  for (const auto& f : files) {
    const std::string b = bytes_of(f);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(one(reinterpret_cast<const std::uint8_t*>(b.data()), b.size()), 0) << f;
    // A hang is caught by the CTest timeout (tests/CMakeLists.txt), not by a timed assertion.
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("  replayed %s (%zu bytes) in %.3f s\n", f.c_str(), b.size(), s);
  }
}

TEST(FuzzRegressions, ConfigInputs) { replay("config", fuzz_config_one); }

// launch/fuzz.sh fails CI only on reports in shardtopk's code; fuzz/classify.awk decides. Each
// log in fuzz/regressions/logs/ is named "<verdict>__<what>.log" (its README says where each
// came from); both verdicts are present, so a classifier that always answers one way fails.
TEST(FuzzClassifier, SortsEachLogAsItsNameSays) {
  const std::string src = SHARDTOPK_SOURCE_DIR;
  int seen[2] = {0, 0};
  for (const auto& f : inputs("logs")) {
    const std::string name = std::filesystem::path(f).filename().string();
    if (std::filesystem::path(f).extension() != ".log") continue;
    const std::string expected = name.substr(0, name.find("__"));
    ASSERT_TRUE(expected == "libhdf5" || expected == "ours") << name << ": name must start with libhdf5__ or ours__";
    ++seen[expected == "ours"];
    const std::string cmd = "awk -f '" + src + "/fuzz/classify.awk' '" + f + "'";
    std::FILE* p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr) << cmd;
    char buf[64] = {0};
    const std::string got = std::fgets(buf, sizeof buf, p) ? std::string(buf) : std::string();
    ASSERT_EQ(::pclose(p), 0) << cmd;
    EXPECT_EQ(got, expected + "\n") << name;
  }
  EXPECT_GT(seen[0], 0) << "no libhdf5__ cases";
  EXPECT_GT(seen[1], 0) << "no ours__ cases";
}
TEST(FuzzRegressions, Hdf5Inputs) { replay("hdf5", fuzz_hdf5_one); }

// The differential harness's prefix variables must be set before libhdf5 starts (it reads them
// once); its files are written on first use.
const bool kDiffPrefixEnvironment = (test::h5m::set_prefix_environment(), true);

TEST(FuzzRegressions, Hdf5DifferentialInputs) {
  ASSERT_TRUE(kDiffPrefixEnvironment);
  ASSERT_EQ(fuzz_hdf5_diff_init(nullptr, nullptr), 0);
  replay("hdf5_diff", fuzz_hdf5_diff_one);
}

// contiguous_past_end_of_file.h5 (fuzz_hdf5_differential): a contiguous float16 dataset whose
// values run past the end of the file's allocated space. libhdf5 reads the whole dataset with
// zeros for rows [24, 37) and fails on a hyperslab there; the reader refuses those rows by name,
// and reads the rows before them.
TEST(FuzzRegressions, ContiguousValuesPastTheEndOfTheFileAreRefused) {
  const std::string f = std::string(SHARDTOPK_SOURCE_DIR) + "/fuzz/regressions/hdf5_diff/contiguous_past_end_of_file.h5";
  for (bool direct : {true, false}) {
    ReadOptions opt;
    opt.direct_reads = direct;
    EXPECT_THAT(test::error_of([&] { read_rows(f, "train", RowRange{0, 37}, opt); }),
                ::testing::AllOf(::testing::HasSubstr("damaged or cut short"), ::testing::HasSubstr("rows [24, 37)"),
                                 ::testing::HasSubstr("zeros")));
    EXPECT_THAT(test::error_of([&] { read_rows(f, "train", RowRange{20, 30}, opt); }),
                ::testing::HasSubstr("rows [24, 30)"));
    EXPECT_EQ(read_rows(f, "train", RowRange{0, 24}, opt).data.size(), 24u * 5u);
  }
}

// chunk_index_disagrees_with_chunk_lookup.h5 (fuzz_hdf5_differential): a damaged chunk index
// where H5Dget_chunk_info_by_coord finds the chunk at row 24 while H5Dread's own lookup may not
// (libhdf5 1.10.8 reads its rows as the fill value, 0; 1.10.10 finds part of it). Taking the
// index walk's view would read other bytes (NaN); the reader asks libhdf5's lookup. Whatever the
// libhdf5 version: rows are either refused as data libhdf5 would fill in, or read equal to
// H5Dread's values, with direct reads on or off.
TEST(FuzzRegressions, ChunksOnlyTheIndexWalkFindsAreNotRead) {
  const std::string f =
      std::string(SHARDTOPK_SOURCE_DIR) + "/fuzz/regressions/hdf5_diff/chunk_index_disagrees_with_chunk_lookup.h5";
  for (bool direct : {true, false}) {
    ReadOptions opt;
    opt.direct_reads = direct;
    opt.chunk_rows = 7;
    const RowRange r{12, 28};
    std::string err;
    HostMatrix got;
    try {
      got = read_rows(f, "train", r, opt);
    } catch (const std::exception& e) {
      err = e.what();
    }
    if (!err.empty()) {
      EXPECT_THAT(err, ::testing::AllOf(::testing::HasSubstr("were never written"),
                                        ::testing::HasSubstr("HDF5 would return the fill value")))
          << "direct_reads " << direct;
    } else {
      std::vector<double> ref;
      ASSERT_TRUE(libhdf5_rows(f, r, got.cols, &ref)) << "the reader read rows H5Dread cannot read";
      ASSERT_EQ(got.data.size(), ref.size());
      for (std::size_t i = 0; i < ref.size(); ++i)
        ASSERT_EQ(static_cast<double>(got.data[i]), ref[i]) << "value " << i << ", direct_reads " << direct;
    }
    EXPECT_EQ(read_rows(f, "train", RowRange{0, 24}, opt).data.size(), 24u * 5u);
  }
}

// The float32 bits of libhdf5's H5Dread of rows `r` in blocks of 7 rows (libhdf5_rows above,
// values rounded to float32 as the reader rounds them), against the reader's, direct reads on or
// off.
void expect_libhdf5_values(const std::string& f, RowRange r, bool direct) {
  ReadOptions opt;
  opt.direct_reads = direct;
  opt.chunk_rows = 7;
  const HostMatrix got = read_rows(f, "train", r, opt);
  std::vector<double> ref;
  ASSERT_TRUE(libhdf5_rows(f, r, got.cols, &ref)) << "the reader read rows H5Dread cannot read";
  ASSERT_EQ(got.data.size(), ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i)
    ASSERT_EQ(half::bits(got.data[i]), half::bits(static_cast<float>(ref[i])))
        << "row " << r.lo + static_cast<std::int64_t>(i) / got.cols << ", column " << i % got.cols << ", direct_reads "
        << direct;
}

// A chunked float64 [37, 5] in chunks of 8 x 3 (192 bytes) without filters, written with
// libhdf5's default (v1 B-tree) chunk index, whose records then get the lengths `lengths` for
// their first chunks: the index records a length for every chunk, filtered or not, and a valid
// file records the chunk's size for an unfiltered one.
void write_unfiltered_chunks_with_lengths(const std::string& path, const std::vector<std::uint32_t>& lengths) {
  const hsize_t dims[2] = {37, 5}, chunk[2] = {8, 3};
  std::vector<double> v(37 * 5);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.25 * static_cast<double>(i) - 7.0;
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t space = H5Screate_simple(2, dims, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  ASSERT_GE(H5Pset_chunk(dcpl, 2, chunk), 0);
  const hid_t ds = H5Dcreate2(f, "train", H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(ds, 0);
  ASSERT_GE(H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
  H5Dclose(ds);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(f);
  std::string b = bytes_of(path);
  // v1 B-tree node of raw data chunks: "TREE", type 1, level, entries (2), two sibling addresses
  // (8 each), then key 0, child 0, key 1, ...; a key is the chunk's length (4 bytes), its filter
  // mask (4) and 3 offsets (8 each), a child an address (8).
  const std::size_t node = b.find(std::string("TREE\x01\x00", 6));
  ASSERT_NE(node, std::string::npos);
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    char* key = &b[node + 24 + i * 40];
    std::uint32_t was = 0;
    std::memcpy(&was, key, 4);
    ASSERT_EQ(was, 192u) << "chunk record " << i;
    std::memcpy(key, &lengths[i], 4);
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << b;
}

// unfiltered_chunk_lengths_not_chunk_size.h5 (fuzz_hdf5_differential, a heap overflow inside
// H5Dread_chunk): chunks of 8 x 3 float64 (192 bytes) without filters whose v1 B-tree records
// other lengths (196, 142, ... bytes; its fill value is damaged too, so that H5Dread fails).
// H5Dread_chunk copies the recorded length, while H5Dget_chunk_storage_size gives an unfiltered
// chunk's size (192): no call says how large its buffer must be. Unfiltered chunks are read
// through H5Dread, which reads a chunk into a buffer of the recorded length and copies 192 bytes
// out of it: a shorter record (142) is refused by name, a longer one (196) reads as H5Dread reads
// it, direct reads on or off.
TEST(FuzzRegressions, UnfilteredChunksReadAsH5DreadReadsThem) {
  const std::string kept =
      std::string(SHARDTOPK_SOURCE_DIR) + "/fuzz/regressions/hdf5_diff/unfiltered_chunk_lengths_not_chunk_size.h5";
  test::TempDir dir;
  const std::string longer = dir.file("longer.h5"), shorter = dir.file("shorter.h5");
  write_unfiltered_chunks_with_lengths(longer, {196});
  write_unfiltered_chunks_with_lengths(shorter, {196, 142});
  const auto refusal = [](const char* rows) {
    return ::testing::AllOf(
        ::testing::HasSubstr("its chunk index records 142 bytes for the chunk at row 0, column 3, which holds 192 "
                             "bytes without filters"),
        ::testing::HasSubstr(std::string("HDF5 would return bytes it never read for ") + rows));
  };
  for (bool direct : {true, false}) {
    ReadOptions opt;
    opt.direct_reads = direct;
    EXPECT_THAT(test::error_of([&] { read_rows(kept, "train", RowRange{0, 37}, opt); }), refusal("rows [0, 8)"))
        << "direct " << direct;
    EXPECT_THAT(test::error_of([&] { read_rows(shorter, "train", RowRange{5, 37}, opt); }), refusal("rows [5, 8)"))
        << "direct " << direct;
    expect_libhdf5_values(shorter, RowRange{8, 37}, direct);
    for (const RowRange r : {RowRange{0, 37}, RowRange{12, 28}, RowRange{30, 37}}) expect_libhdf5_values(longer, r, direct);
  }
  const ReadPlan plan = plan_row_reads(longer, "train");
  EXPECT_EQ(plan.method, ReadMethod::kHdf5);
  EXPECT_THAT(plan.reason, ::testing::HasSubstr("chunks without filters"));
}

// contiguous_storage_recorded_short.h5 (fuzz_hdf5_differential): a contiguous float32 [37, 5]
// (740 bytes) whose layout message records 739 bytes of storage. libhdf5 reads the whole dataset
// from the file, but a read of its last rows through its sieve buffer, which it fills with the 39
// recorded bytes from row 35 on and copies 40 from: the last value's top byte is left from the
// first block's read (-1.058 for -4.232, bias 126). The reader refuses the rows past the recorded
// size by name and reads the rows before them as libhdf5 does, direct reads on or off.
TEST(FuzzRegressions, ContiguousStorageRecordedShorterThanTheDatasetIsRefused) {
  const std::string f = std::string(SHARDTOPK_SOURCE_DIR) + "/fuzz/regressions/hdf5_diff/contiguous_storage_recorded_short.h5";
  for (bool direct : {true, false}) {
    ReadOptions opt;
    opt.direct_reads = direct;
    opt.chunk_rows = 7;
    EXPECT_THAT(test::error_of([&] { read_rows(f, "train", RowRange{0, 37}, opt); }),
                ::testing::AllOf(::testing::HasSubstr("contiguous storage is recorded as 739 bytes, fewer than the 740"),
                                 ::testing::HasSubstr("left from an earlier read for rows [36, 37)")))
        << "direct_reads " << direct;
    EXPECT_THAT(test::error_of([&] { read_rows(f, "train", RowRange{30, 37}, opt); }),
                ::testing::HasSubstr("rows [36, 37)"));
    expect_libhdf5_values(f, RowRange{0, 36}, direct);
    expect_libhdf5_values(f, RowRange{29, 36}, direct);
  }
}

// float_type_precision_beyond_size.h5 (fuzz_hdf5_differential): a float type damaged to 3 bytes
// with a precision of 32 bits. libhdf5 converts 4 bytes per 3-byte value, so a value's result
// depends on the bytes after it in each read (blocks of 7 rows give other numbers than a whole
// read, or NaN). The reader refuses such a type by name.
TEST(FuzzRegressions, FloatTypeWiderThanItsBytesIsRefused) {
  const std::string f = std::string(SHARDTOPK_SOURCE_DIR) + "/fuzz/regressions/hdf5_diff/float_type_precision_beyond_size.h5";
  for (bool direct : {true, false}) {
    ReadOptions opt;
    opt.direct_reads = direct;
    EXPECT_THAT(test::error_of([&] { read_rows(f, "train", RowRange{0, 37}, opt); }),
                ::testing::HasSubstr("has an invalid float type (precision 32 at bit 0 in 3 bytes)"));
  }
}

// float_type_of_553mb_per_value.h5 (fuzz_hdf5_differential, a timeout): a float type damaged to
// 553,648,136 bytes per value; libhdf5 converts such values one at a time for minutes. The reader
// refuses it at once.
TEST(FuzzRegressions, FloatTypeOfHundredsOfMegabytesIsRefused) {
  const std::string f = std::string(SHARDTOPK_SOURCE_DIR) + "/fuzz/regressions/hdf5_diff/float_type_of_553mb_per_value.h5";
  for (bool direct : {true, false}) {
    ReadOptions opt;
    opt.direct_reads = direct;
    EXPECT_THAT(test::error_of([&] { read_rows(f, "train", RowRange{0, 37}, opt); }),
                ::testing::AllOf(::testing::HasSubstr("float type of 553648136 bytes"),
                                 ::testing::HasSubstr("expected float16, float32 or float64")));
  }
}

// float_type_of_0_bytes.h5 (fuzz_hdf5_differential): a float type damaged to 0 bytes per value,
// which libhdf5 reads (every value converted from no bits). The reader refuses it by name, direct
// reads on or off.
TEST(FuzzRegressions, FloatTypeOfZeroBytesIsRefused) {
  const std::string f = std::string(SHARDTOPK_SOURCE_DIR) + "/fuzz/regressions/hdf5_diff/float_type_of_0_bytes.h5";
  for (bool direct : {true, false}) {
    ReadOptions opt;
    opt.direct_reads = direct;
    EXPECT_THAT(test::error_of([&] { read_rows(f, "train", RowRange{0, 37}, opt); }),
                ::testing::AllOf(::testing::HasSubstr("float type of 0 bytes"),
                                 ::testing::HasSubstr("expected float16, float32 or float64")));
  }
}

// deflate_level_out_of_range.h5 (fuzz_hdf5_differential): a chunked float64 [37, 5] whose deflate
// filter carries a level above 9. Inflating needs no level, but libhdf5's filter refuses every
// chunk it is given ("invalid deflate aggression level"); the direct chunk path leaves such a
// pipeline to libhdf5 and refuses the rows as it does, direct reads on or off.
TEST(FuzzRegressions, DeflateLevelLibhdf5RefusesIsRefused) {
  const std::string f = std::string(SHARDTOPK_SOURCE_DIR) + "/fuzz/regressions/hdf5_diff/deflate_level_out_of_range.h5";
  for (bool direct : {true, false}) {
    ReadOptions opt;
    opt.direct_reads = direct;
    for (const RowRange r : {RowRange{0, 37}, RowRange{12, 28}}) {
      const std::string e = test::error_of([&] { read_rows(f, "train", r, opt); });
      EXPECT_THAT(e, ::testing::HasSubstr("H5Dread")) << "direct " << direct << ", rows " << r.lo;
      EXPECT_THAT(e, ::testing::HasSubstr("train")) << "direct " << direct << ", rows " << r.lo;
    }
  }
}

// attr_count_timeout.h5 (fuzz_hdf5_meta, a timeout): on a damaged root object header
// H5Oget_info fails, and an unchecked call would leave an uninitialised attribute count to loop
// over (billions of failing H5Aopen_by_idx calls). inspect_file checks the call (Error naming the
// file) and stops at the first attribute that cannot be opened.
TEST(FuzzRegressions, DamagedAttributeCountEndsPromptly) {
  const std::string f = std::string(SHARDTOPK_SOURCE_DIR) + "/fuzz/regressions/hdf5/attr_count_timeout.h5";
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const FileInfo fi = inspect_file(f);
    EXPECT_LE(fi.attributes.size(), 16u);
  } catch (const Error& e) {
    std::printf("  error: %s\n", e.what());
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
}

// group_cycle_timeout.h5 (fuzz_hdf5_meta, a timeout): a group linking to its ancestor. The
// dataset walk of inspect_file (and of every "has no dataset" message) visits each group once,
// so it ends.
TEST(FuzzRegressions, GroupCycleEndsPromptly) {
  const std::string f = std::string(SHARDTOPK_SOURCE_DIR) + "/fuzz/regressions/hdf5/group_cycle_timeout.h5";
  const auto t0 = std::chrono::steady_clock::now();
  try {
    inspect_file(f);
    inspect_dataset(f, "no-such-dataset");
  } catch (const Error& e) {
    std::printf("  error: %s\n", e.what());
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
}

}  // namespace
}  // namespace shardtopk
