// The row reader's paths (pread of contiguous data, direct chunk decode, H5Dread) give the same
// values for every split, block size and thread count; float16 conversion with and without F16C;
// the first bad value named whatever the threads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/shard_plan.hpp"
#include "core/half.hpp"
#include "h5_dcpl.hpp"
#include "h5_raw.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;
using test::error_of;
using test::half_type;
using test::write_with_dcpl;
using test::Disk;
using test::disk_name;
using test::write_raw_dataset;


struct PathCase {
  const char* what;
  int disk;      // 0 float16, 1 float32 LE, 2 float64, 3 float32 big-endian
  int layout;    // 0 contiguous, 1 chunked (4 rows x 2 cols), 2 chunked shuffle+deflate, 3 fletcher32+deflate
  bool hdf5_only;  // ReadOptions::direct_reads off: the H5Dread path
};
std::ostream& operator<<(std::ostream& os, const PathCase& c) { return os << c.what << (c.hdf5_only ? " (H5Dread)" : ""); }

class ReaderPaths : public ::testing::TestWithParam<PathCase> {};

// Every reading path (pread of contiguous data, direct chunk decode with partial-width edge
// chunks, H5Dread for big-endian, unfiltered chunks and fletcher32) gives the same float32 values
// and float16 bits for every split, block size and thread count.
TEST_P(ReaderPaths, SameValuesEveryPathSplitAndThreadCount) {
  const PathCase c = GetParam();
  test::TempDir dir;
  const std::string path = dir.file("p.h5");
  const std::int64_t rows = 29, cols = 5;
  std::vector<float> expect = test::round_to(Dtype::kFloat16, test::random_floats(rows * cols, 9, -4.0f, 4.0f));
  std::vector<double> vals(expect.begin(), expect.end());
  hid_t ftype = c.disk == 0 ? half_type() : H5Tcopy(c.disk == 1 ? H5T_IEEE_F32LE : c.disk == 2 ? H5T_IEEE_F64LE : H5T_IEEE_F32BE);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (c.layout > 0) {
    const hsize_t chunk[2] = {4, 2};
    H5Pset_chunk(dcpl, 2, chunk);
    if (c.layout == 3) H5Pset_fletcher32(dcpl);
    if (c.layout == 2) H5Pset_shuffle(dcpl);
    if (c.layout >= 2) H5Pset_deflate(dcpl, 4);
  }
  write_with_dcpl(path, "train", ftype, rows, cols, dcpl, &vals);
  H5Pclose(dcpl);
  H5Tclose(ftype);
  for (int threads : {1, 2, 3}) {
    for (std::int64_t block : {std::int64_t{1}, std::int64_t{3}, std::int64_t{7}, std::int64_t{100}}) {
      for (int world : {1, 2, 3, 5}) {
        for (int r = 0; r < world; ++r) {
          const RowRange rr = shard_rows(rows, world, r);
          ReadOptions opt;
          opt.chunk_rows = block;
          opt.threads = threads;
          opt.direct_reads = !c.hdf5_only;
          const HostMatrix m = read_rows(path, "train", rr, opt);
          ASSERT_EQ(m.data, std::vector<float>(expect.begin() + rr.lo * cols, expect.begin() + rr.hi * cols))
              << "threads " << threads << " block " << block << " P=" << world << " rank " << r;
          std::vector<float> into(static_cast<size_t>(rr.size() * cols) + 1, -7.0f);
          EXPECT_EQ(read_rows_into(path, "train", rr, opt, into.data()), cols);
          into.pop_back();
          EXPECT_EQ(into, m.data);
          std::vector<std::uint16_t> bits;
          std::int64_t next = rr.lo;
          read_row_blocks(path, "train", rr, RowFormat::kFloat16Bits, opt, [&](const RowBlock& b) {
            EXPECT_EQ(b.first_row, next);
            EXPECT_EQ(b.cols, cols);
            EXPECT_EQ(b.format, RowFormat::kFloat16Bits);
            EXPECT_LE(b.rows, block);
            next += b.rows;
            const auto* h = static_cast<const std::uint16_t*>(b.data);
            bits.insert(bits.end(), h, h + b.rows * b.cols);
          });
          EXPECT_EQ(next, rr.hi);
          ASSERT_EQ(bits.size(), m.data.size());
          for (size_t i = 0; i < bits.size(); ++i) ASSERT_EQ(bits[i], half::to_f16(m.data[i])) << i;
        }
      }
    }
  }
}

// Cases: each dtype and layout the fast paths take, and the ones that fall back to H5Dread.
INSTANTIATE_TEST_SUITE_P(
    Paths, ReaderPaths,
    ::testing::Values(PathCase{"float16 contiguous", 0, 0, false}, PathCase{"float32 contiguous", 1, 0, false},
                      PathCase{"float64 contiguous", 2, 0, false}, PathCase{"float32 big-endian", 3, 0, false},
                      PathCase{"float16 chunked 4x2", 0, 1, false}, PathCase{"float32 chunked shuffle+deflate", 1, 2, false},
                      PathCase{"float16 chunked shuffle+deflate", 0, 2, false},
                      PathCase{"float64 chunked shuffle+deflate", 2, 2, false},
                      PathCase{"float32 fletcher32+deflate", 1, 3, false}, PathCase{"float16 contiguous", 0, 0, true},
                      PathCase{"float32 chunked shuffle+deflate", 1, 2, true}));

TEST(CorpusIo, EveryFiniteFloat16ConvertsExactlyWithAndWithoutF16c) {
  // All 63,488 finite float16 bit patterns (signed zeros, subnormals, 65504): the F16C path and
  // the portable table give half::from_f16's float32, bit for bit, and the raw-bits format
  // returns the stored bits unchanged.
  std::vector<std::uint16_t> bits;
  for (std::uint32_t h = 0; h < 65536; ++h)
    if ((h & 0x7C00u) != 0x7C00u) bits.push_back(static_cast<std::uint16_t>(h));
  ASSERT_EQ(bits.size(), 63488u);
  std::vector<double> vals(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) vals[i] = half::from_f16(bits[i]);
  test::TempDir dir;
  const std::string path = dir.file("allhalf.h5");
  hid_t ht = half_type();
  write_with_dcpl(path, "train", ht, bits.size() / 8, 8, H5P_DEFAULT, &vals);
  H5Tclose(ht);
  for (bool f16c : {true, false}) {
    ReadOptions opt;
    opt.f16c = f16c;
    opt.threads = 2;
    opt.chunk_rows = 1000;
    const HostMatrix m = read_rows(path, "train", RowRange{0, static_cast<std::int64_t>(bits.size() / 8)}, opt);
    for (size_t i = 0; i < bits.size(); ++i)
      ASSERT_EQ(half::bits(m.data[i]), half::bits(half::from_f16(bits[i]))) << "f16 bits " << bits[i] << " f16c " << f16c;
    std::vector<std::uint16_t> back;
    read_row_blocks(path, "train", RowRange{0, static_cast<std::int64_t>(bits.size() / 8)}, RowFormat::kFloat16Bits, opt,
                    [&](const RowBlock& b) {
                      const auto* h = static_cast<const std::uint16_t*>(b.data);
                      back.insert(back.end(), h, h + b.rows * b.cols);
                    });
    EXPECT_EQ(back, bits);
  }
  // Inf and NaN in float16 data are found by both paths, first in row order.
  std::vector<double> bad(40 * 8, 0.25);
  bad[37 * 8 + 1] = std::numeric_limits<double>::quiet_NaN();
  bad[5 * 8 + 3] = -std::numeric_limits<double>::infinity();
  ht = half_type();
  write_with_dcpl(path, "bad", ht, 40, 8, H5P_DEFAULT, &bad);
  H5Tclose(ht);
  for (bool f16c : {true, false}) {
    for (RowFormat fmt : {RowFormat::kFloat32, RowFormat::kFloat16Bits}) {
      ReadOptions opt;
      opt.f16c = f16c;
      opt.label = "corpus row";
      EXPECT_THAT(error_of([&] { read_row_blocks(path, "bad", RowRange{0, 40}, fmt, opt, [](const RowBlock&) {}); }),
                  AllOf(HasSubstr("corpus row 5 "), HasSubstr("non-finite value (-inf)"), HasSubstr("column 3")))
          << "f16c " << f16c;
      EXPECT_THAT(error_of([&] { read_row_blocks(path, "bad", RowRange{6, 40}, fmt, opt, [](const RowBlock&) {}); }),
                  AllOf(HasSubstr("corpus row 37 "), HasSubstr("nan"), HasSubstr("column 1")));
    }
  }
}

TEST(CorpusIo, Float32ToFloat16BitsRoundsLikeTheEngine) {
  // float32 data requested as float16 bits: F16C and the portable path both round to nearest
  // even exactly as half::to_f16 (the engines' conversion), subnormals and ties included.
  std::vector<float> v = test::random_floats(4000, 31, -70000.0f, 70000.0f);
  const auto small = test::random_floats(4000, 32, -1e-4f, 1e-4f);  // float16 subnormals
  v.insert(v.end(), small.begin(), small.end());
  for (float base : {1.0f, 2.001953125f, -1.0009765625f, 6.103515625e-05f})
    v.push_back(std::nextafter(base, 10.0f));
  v.push_back(65519.99f);  // rounds to 65504
  v.push_back(1.00048828125f);  // exact tie between 1 and 1.0009765625: even is 1
  for (auto& x : v) x = std::max(-65504.0f, std::min(65504.0f, x));
  v.resize(v.size() / 4 * 4);
  test::TempDir dir;
  const std::string path = dir.file("f32.h5");
  {
    H5Writer w(path);
    w.write_f32("train", v.data(), static_cast<std::int64_t>(v.size() / 4), 4);
  }
  for (bool f16c : {true, false}) {
    std::vector<std::uint16_t> got;
    ReadOptions opt;
    opt.f16c = f16c;
    opt.threads = 2;
    read_row_blocks(path, "train", RowRange{0, static_cast<std::int64_t>(v.size() / 4)}, RowFormat::kFloat16Bits, opt,
                    [&](const RowBlock& b) {
                      const auto* h = static_cast<const std::uint16_t*>(b.data);
                      got.insert(got.end(), h, h + b.rows * b.cols);
                    });
    ASSERT_EQ(got.size(), v.size());
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(got[i], half::to_f16(v[i])) << v[i] << " f16c " << f16c;
  }
}

TEST(CorpusIo, BadValueMessageIsTheFirstInRowOrderWhateverTheThreads) {
  // Several bad values in different pieces and chunks: every thread count names the same one.
  test::TempDir dir;
  const std::string path = dir.file("many.h5");
  const std::int64_t rows = 4000, cols = 64;
  auto v = test::random_floats(rows * cols, 5);
  v[3999 * cols + 1] = std::numeric_limits<float>::quiet_NaN();
  v[2500 * cols + 60] = std::numeric_limits<float>::infinity();
  v[1234 * cols + 7] = -std::numeric_limits<float>::infinity();
  {
    H5Writer w(path);
    w.write_f32("flat", v.data(), rows, cols);
    w.write_f32("gz", v.data(), rows, cols, 100);
  }
  for (const char* ds : {"flat", "gz"}) {
    for (int t : {1, 2, 4}) {
      ReadOptions opt;
      opt.threads = t;
      opt.label = "corpus row";
      EXPECT_THAT(error_of([&] { read_rows(path, ds, RowRange{0, rows}, opt); }),
                  AllOf(HasSubstr("corpus row 1234 "), HasSubstr("-inf"), HasSubstr("column 7")))
          << ds << " threads " << t;
    }
  }
}

// A dataset stored through a filter this libhdf5 cannot apply (h5py's LZF, tests/data/hdf5) is
// refused naming the filter, not as a truncated or corrupt file.
TEST(CorpusIo, AFilterLibhdf5CannotApplyIsNamed) {
  if (H5Zfilter_avail(32000) > 0) GTEST_SKIP() << "an LZF plugin is installed here: the file can be read";
  const std::string path = std::string(SHARDTOPK_SOURCE_DIR) + "/tests/data/hdf5/lzf-100x8.h5";
  for (const bool direct : {true, false}) {
    ReadOptions opt;
    opt.direct_reads = direct;
    const std::string msg = test::error_of([&] { (void)read_rows(path, "train", RowRange{0, 100}, opt); });
    EXPECT_THAT(msg, AllOf(HasSubstr("dataset 'train' is stored through filter 32000 ('lzf'), which this HDF5 library "
                                     "cannot decode"),
                           Not(HasSubstr("corrupt"))))
        << msg;
  }
  // Every other reader (attributes, ids, whole matrices) names the unregistered filter too
  const std::string whole = test::error_of([&] { (void)read_matrix(path, "train"); });
  EXPECT_THAT(whole, AnyOf(HasSubstr("required filter 'lzf' is not registered (its plugin is not installed"),
                           HasSubstr("stored through filter 32000 ('lzf')")))
      << whole;
}

// A chunk whose deflate stream was damaged on disk (one byte of the middle of its stored bytes
// changed) is refused naming the chunk, its rows and zlib's reason, on every path and thread
// count; the chunks before it still read.
TEST(CorpusIo, ADamagedDeflateChunkIsRefusedNamingItsRows) {
  test::TempDir dir;
  const std::string path = dir.file("damaged.h5");
  const hsize_t chunk[2] = {8, 4};
  std::vector<double> vals(32 * 4);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>(std::sin(static_cast<double>(i)) * 3.0);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  ASSERT_GE(H5Pset_chunk(dcpl, 2, chunk), 0);
  ASSERT_GE(H5Pset_shuffle(dcpl), 0);
  ASSERT_GE(H5Pset_deflate(dcpl, 6), 0);
  write_with_dcpl(path, "train", H5T_IEEE_F32LE, 32, 4, dcpl, &vals);
  H5Pclose(dcpl);
  haddr_t addr = 0;
  hsize_t size = 0;
  {  // where the chunk of rows 16 .. 23 is stored
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    const hid_t ds = H5Dopen2(f, "train", H5P_DEFAULT);
    ASSERT_GE(ds, 0);
    const hsize_t at[2] = {16, 0};
    unsigned mask = 0;
    ASSERT_GE(H5Dget_chunk_info_by_coord(ds, at, &mask, &addr, &size), 0);
    H5Dclose(ds);
    H5Fclose(f);
  }
  ASSERT_GT(size, 8u);
  {
    std::FILE* fp = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(fp, nullptr);
    ASSERT_EQ(std::fseek(fp, static_cast<long>(addr + size / 2), SEEK_SET), 0);
    const int byte = std::fgetc(fp);
    ASSERT_NE(byte, EOF);
    ASSERT_EQ(std::fseek(fp, static_cast<long>(addr + size / 2), SEEK_SET), 0);
    ASSERT_NE(std::fputc(byte ^ 0x5a, fp), EOF);
    std::fclose(fp);
  }
  ASSERT_EQ(plan_row_reads(path, "train").method, ReadMethod::kDirectChunks);
  for (const int threads : {1, 3}) {
    ReadOptions opt;
    opt.threads = threads;
    const std::string msg = error_of([&] { (void)read_rows(path, "train", RowRange{0, 32}, opt); });
    EXPECT_THAT(msg, AllOf(HasSubstr("chunk at row 16, column 0 of 'train' (rows [16, 24))"),
                           HasSubstr("deflate data is corrupt (zlib: ")))
        << msg;
    const HostMatrix head = read_rows(path, "train", RowRange{0, 16}, opt);
    ASSERT_EQ(head.data.size(), 16u * 4u);
    for (size_t i = 0; i < head.data.size(); ++i) ASSERT_EQ(head.data[i], static_cast<float>(vals[i])) << i;
  }
  ReadOptions via_hdf5;
  via_hdf5.direct_reads = false;
  EXPECT_FALSE(error_of([&] { (void)read_rows(path, "train", RowRange{16, 24}, via_hdf5); }).empty());
}

// A deflate chunk larger than 64 MiB would need that much scratch per reader thread: such
// chunks are decoded by libhdf5 (the plan says why), with the same values. [37, 5] float32 rows
// in one chunk of 4,194,304 × 5 values (80 MiB; the rows are unlimited, so the chunk may be
// longer than the dataset).
TEST(CorpusIo, FilteredChunksOverSixtyFourMebibytesAreDecodedByLibhdf5) {
  test::TempDir dir;
  const std::string path = dir.file("big_chunk.h5");
  const hsize_t dims[2] = {37, 5}, maxdims[2] = {H5S_UNLIMITED, 5}, chunk[2] = {hsize_t{1} << 22, 5};
  std::vector<double> vals(37 * 5);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<double>(i % 11) - 5.25;
  {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    const hid_t space = H5Screate_simple(2, dims, maxdims);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    ASSERT_GE(H5Pset_chunk(dcpl, 2, chunk), 0);
    ASSERT_GE(H5Pset_deflate(dcpl, 1), 0);
    const hid_t ds = H5Dcreate2(f, "train", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(ds, 0);
    ASSERT_GE(H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, vals.data()), 0);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(f);
  }
  const ReadPlan plan = plan_row_reads(path, "train");
  EXPECT_EQ(plan.method, ReadMethod::kHdf5);
  EXPECT_THAT(plan.reason, ::testing::HasSubstr("filtered chunks of more than 64 MiB"));
  ReadOptions opt;
  opt.chunk_rows = 64;  // one H5Dread per range: each decodes the whole 80 MiB chunk
  for (const RowRange r : {RowRange{0, 37}, RowRange{12, 28}}) {
    const HostMatrix m = read_rows(path, "train", r, opt);
    ASSERT_EQ(m.data.size(), static_cast<size_t>(r.size() * 5));
    for (std::int64_t i = 0; i < r.size() * 5; ++i)
      ASSERT_EQ(m.data[static_cast<size_t>(i)], static_cast<float>(vals[static_cast<size_t>(r.lo * 5 + i)])) << i;
  }
}

}  // namespace
}  // namespace shardtopk
