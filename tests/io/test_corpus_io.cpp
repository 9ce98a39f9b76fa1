// HDF5 corpus I/O: hyperslab reads of one rank's rows at odd splits for every on-disk dtype
// and layout, inspection, and every file-level error with its message.
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
#include "h5_raw.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using test::error_of;

using test::Disk;
using test::disk_name;
using test::write_raw_dataset;

// ------------------------------------------------------------------------------ reads at odd splits

struct ReadCase {
  Disk disk;
  bool chunked;        // chunked + deflate on disk
  bool via_h5writer;   // written by H5Writer (else by the raw HDF5 helper above)
  std::int64_t rows, dim;
};
std::ostream& operator<<(std::ostream& os, const ReadCase& c) {
  return os << disk_name(c.disk) << (c.chunked ? " chunked+deflate" : " contiguous")
            << (c.via_h5writer ? " (H5Writer)" : " (raw HDF5)") << " [" << c.rows << "," << c.dim << "]";
}

class HyperslabRead : public ::testing::TestWithParam<ReadCase> {};

TEST_P(HyperslabRead, EveryRankGetsExactlyItsRows) {
  const ReadCase c = GetParam();
  test::TempDir dir;
  const std::string path = dir.file("c.h5");
  const size_t n = static_cast<size_t>(c.rows * c.dim);
  // Values exactly representable in the on-disk dtype, so the expected float32 is unambiguous.
  std::vector<float> expect = test::random_floats(n, 42, -8.0f, 8.0f);
  std::vector<double> as_double(n);
  if (c.disk == Disk::kF16) expect = test::round_to(Dtype::kFloat16, expect);
  if (c.disk == Disk::kF64) {
    const auto extra = test::random_floats(n, 43, -1e-9f, 1e-9f);
    for (size_t i = 0; i < n; ++i) as_double[i] = static_cast<double>(expect[i]) + extra[i];  // not float-exact
    for (size_t i = 0; i < n; ++i) expect[i] = static_cast<float>(as_double[i]);
  } else {
    for (size_t i = 0; i < n; ++i) as_double[i] = expect[i];
  }
  if (c.via_h5writer) {
    H5Writer w(path);
    if (c.disk == Disk::kF16) w.write_f16("train", expect.data(), c.rows, c.dim);
    if (c.disk == Disk::kF32) w.write_f32("train", expect.data(), c.rows, c.dim, c.chunked ? 4 : 0);
    if (c.disk == Disk::kF64) w.write_f64("train", as_double.data(), c.rows, c.dim);
    w.close();
  } else {
    write_raw_dataset(path, "train", c.disk, as_double, {static_cast<hsize_t>(c.rows), static_cast<hsize_t>(c.dim)},
                      c.chunked ? 4 : 0);
  }
  const DatasetInfo info = inspect_dataset(path, "train");
  EXPECT_EQ(info.dtype, disk_name(c.disk));
  EXPECT_TRUE(info.is_float);
  EXPECT_EQ(info.chunked, c.chunked);
  if (c.chunked) EXPECT_THAT(info.filters, HasSubstr("deflate"));
  ASSERT_EQ(info.dims, (std::vector<std::int64_t>{c.rows, c.dim}));

  // Every split of rows over P ranks, read in chunks that straddle the file's 4-row chunks.
  for (int world : {1, 2, 3, 4, 5, 7, static_cast<int>(c.rows) + 2}) {
    for (std::int64_t read_chunk : {std::int64_t{1}, std::int64_t{3}, std::int64_t{5}, std::int64_t{65536}}) {
      for (int r = 0; r < world; ++r) {
        const RowRange rr = shard_rows(c.rows, world, r);
        std::int64_t last_done = -1, calls = 0;
        const HostMatrix m = read_rows(
            path, "train", rr, read_chunk,
            [&](std::int64_t done, std::int64_t total) {
              EXPECT_GT(done, last_done);
              EXPECT_EQ(total, rr.size());
              last_done = done;
              ++calls;
            },
            "corpus row");
        ASSERT_EQ(m.rows, rr.size());
        ASSERT_EQ(m.cols, c.dim);
        ASSERT_EQ(m.data.size(), static_cast<size_t>(rr.size() * c.dim));
        for (std::int64_t i = 0; i < rr.size() * c.dim; ++i)
          ASSERT_EQ(m.data[i], expect[rr.lo * c.dim + i])
              << "P=" << world << " rank " << r << " chunk " << read_chunk << " row " << rr.lo + i / c.dim;
        if (rr.size() > 0) {
          EXPECT_EQ(last_done, rr.size());
          EXPECT_EQ(calls, (rr.size() + read_chunk - 1) / read_chunk);
        }
      }
    }
  }
  const HostMatrix all = read_matrix(path, "train");
  EXPECT_EQ(all.data, expect);
}

// Cases: each on-disk dtype, contiguous and chunked+deflate, written by H5Writer and by the raw
// HDF5 API; odd shapes (37 x 5: no split is even; 1 x 1; 9 x 33).
INSTANTIATE_TEST_SUITE_P(
    Cases, HyperslabRead,
    ::testing::Values(ReadCase{Disk::kF16, false, true, 37, 5}, ReadCase{Disk::kF32, false, true, 37, 5},
                      ReadCase{Disk::kF32, true, true, 37, 5}, ReadCase{Disk::kF64, false, true, 37, 5},
                      ReadCase{Disk::kF16, true, false, 37, 5}, ReadCase{Disk::kF32, true, false, 37, 5},
                      ReadCase{Disk::kF64, true, false, 37, 5}, ReadCase{Disk::kF32, false, false, 1, 1},
                      ReadCase{Disk::kF16, true, false, 9, 33}, ReadCase{Disk::kF64, true, false, 9, 33}));

TEST(CorpusIo, NestedDatasetPathAndInspection) {
  test::TempDir dir;
  const std::string path = dir.file("n.h5");
  const auto v = test::random_floats(6 * 4, 1);
  const std::vector<std::int64_t> ids = {10, 11, 12, 13, 14, 15};
  {
    H5Writer w(path);
    w.write_f32("emb/vectors", v.data(), 6, 4);
    w.write_i64("meta/ids", ids.data(), 6, 0);
    w.write_strings("words", {"a", "bb", "ccc"});
    w.set_attr("distance", std::string("angular"));
    w.set_attr("answer", std::int64_t{42});
    w.set_attr("pi", 3.25);
    w.close();
  }
  const HostMatrix m = read_rows(path, "emb/vectors", RowRange{2, 5});
  EXPECT_EQ(m.rows, 3);
  EXPECT_EQ(std::vector<float>(m.data.begin(), m.data.end()), std::vector<float>(v.begin() + 8, v.begin() + 20));
  // A leading slash is accepted.
  EXPECT_EQ(read_rows(path, "/emb/vectors", RowRange{2, 5}).data, m.data);
  EXPECT_EQ(read_int64_vector(path, "meta/ids"), ids);
  EXPECT_EQ(read_string_attribute(path, "distance"), "angular");
  EXPECT_EQ(read_string_attribute(path, "absent"), "");

  const FileInfo fi = inspect_file(path);
  std::vector<std::string> names;
  for (const auto& d : fi.datasets) names.push_back(d.name);
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("emb/vectors", "meta/ids", "words"));
  EXPECT_EQ(fi.attributes.at("distance"), "angular");
  EXPECT_EQ(fi.attributes.at("answer"), "42");
  EXPECT_EQ(fi.attributes.at("pi"), "3.25");
}

TEST(CorpusIo, Float16EdgeValuesRoundTripExactly) {
  // float16 extremes, the smallest normal, subnormals and signed zeros survive write_f16 and the
  // reader's conversion to float32 unchanged.
  const std::vector<float> v = {0.0f,           -0.0f,          1.0f,          -1.0f,         65504.0f,
                                -65504.0f,      6.103515625e-05f, 5.9604644775390625e-08f, -5.9604644775390625e-08f,
                                3.0517578125e-05f, 0.333251953125f, -2048.0f,     2050.0f,       1.0009765625f,
                                0.5f,           -0.099975586f};
  std::vector<float> expect = test::round_to(Dtype::kFloat16, v);
  ASSERT_EQ(expect.size() % 4, 0u);
  test::TempDir dir;
  const std::string path = dir.file("f16.h5");
  {
    H5Writer w(path);
    w.write_f16("train", expect.data(), static_cast<std::int64_t>(expect.size() / 4), 4);
  }
  const HostMatrix m = read_matrix(path, "train");
  ASSERT_EQ(m.data.size(), expect.size());
  for (size_t i = 0; i < expect.size(); ++i) {
    EXPECT_EQ(m.data[i], expect[i]) << "value " << i;
    EXPECT_EQ(std::signbit(m.data[i]), std::signbit(expect[i])) << "value " << i;
  }
}

TEST(CorpusIo, Float16WriteRoundsLikeTheEngine) {
  // write_f16 of values that float16 cannot hold stores what half::to_f16 (round to nearest
  // even, the engine's float16 storage) gives, so a file written from float32 and an engine
  // fed the same float32 rows agree. Midpoints between two float16 values are included.
  std::vector<float> v = test::random_floats(4000, 77, -3.0f, 3.0f);
  for (float base : {1.0f, 1.0009765625f, 2.001953125f, -1.0f})  // exact midpoints (ties)
    v.push_back(base + 0.00048828125f * (std::fabs(base) >= 2.0f ? 2.0f : 1.0f) * (base < 0 ? -1.0f : 1.0f));
  v.resize(v.size() / 4 * 4);
  test::TempDir dir;
  const std::string path = dir.file("f16r.h5");
  {
    H5Writer w(path);
    w.write_f16("train", v.data(), static_cast<std::int64_t>(v.size() / 4), 4);
  }
  const HostMatrix m = read_matrix(path, "train");
  const std::vector<float> expect = test::round_to(Dtype::kFloat16, v);
  int differ = 0;
  for (size_t i = 0; i < v.size(); ++i)
    if (m.data[i] != expect[i] && ++differ <= 5)
      ADD_FAILURE() << "value " << v[i] << ": file holds " << m.data[i] << ", half::to_f16 gives " << expect[i];
  EXPECT_EQ(differ, 0);
}

TEST(CorpusIo, StreamedRowsMatchWholeDatasetWrites) {
  // create_rows + write_rows (blocks out of order) store what write_f16 / write_f32 store for the
  // same values, contiguous and chunked; rows outside the dataset and other dtypes are refused.
  const std::int64_t rows = 1000, cols = 7;
  std::vector<float> v = test::random_floats(rows * cols, 78, -70000.0f, 70000.0f);
  for (std::int64_t i = 0; i < rows * cols; i += 3) v[i] *= 1e-4f;  // small values too
  for (auto& x : v) x = std::fmax(-65000.0f, std::fmin(65000.0f, x));  // within float16
  test::TempDir dir;
  for (const Dtype dt : {Dtype::kFloat16, Dtype::kFloat32}) {
    for (const std::int64_t chunk : {std::int64_t{0}, std::int64_t{128}}) {
      SCOPED_TRACE(to_string(dt) + (chunk ? " chunked" : " contiguous"));
      const std::string path = dir.file("rows.h5"), whole = dir.file("whole.h5");
      {
        H5Writer w(path);
        w.create_rows("emb/train", dt, rows, cols, chunk);
        w.write_rows(600, 400, v.data() + 600 * cols);
        w.write_rows(0, 600, v.data());
        EXPECT_THAT(error_of([&] { w.write_rows(990, 11, v.data()); }),
                    AllOf(HasSubstr("rows [990, 1001)"), HasSubstr("emb/train"), HasSubstr("1000 rows")));
        w.close();
      }
      {
        H5Writer w(whole);
        if (dt == Dtype::kFloat16) w.write_f16("emb/train", v.data(), rows, cols);
        else w.write_f32("emb/train", v.data(), rows, cols);
      }
      const HostMatrix a = read_matrix(path, "emb/train"), b = read_matrix(whole, "emb/train");
      EXPECT_EQ(a.data, b.data);
      EXPECT_EQ(inspect_dataset(path, "emb/train").dtype, to_string(dt));
    }
  }
  H5Writer w(dir.file("bad.h5"));
  EXPECT_THAT(error_of([&] { w.create_rows("x", Dtype::kBFloat16, 4, 4); }), HasSubstr("not bfloat16"));
  EXPECT_THAT(error_of([&] { w.write_rows(0, 1, v.data()); }), HasSubstr("write_rows without create_rows"));
}

TEST(CorpusIo, OnlyTheRequestedRowsAreValidated) {
  // A NaN in row 30 is not this rank's problem when it reads rows [0, 20).
  test::TempDir dir;
  const std::string path = dir.file("nan.h5");
  auto v = test::random_floats(37 * 5, 2);
  v[30 * 5 + 2] = std::numeric_limits<float>::quiet_NaN();
  {
    H5Writer w(path);
    w.write_f32("train", v.data(), 37, 5);
  }
  EXPECT_NO_THROW(read_rows(path, "train", RowRange{0, 20}));
  EXPECT_NO_THROW(read_rows(path, "train", RowRange{31, 37}));
}

// ------------------------------------------------------------------------------ errors

class CorpusIoErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("good.h5");
    good_ = test::random_floats(37 * 5, 3);
    H5Writer w(path_);
    w.write_f32("train", good_.data(), 37, 5);
    const std::vector<std::int32_t> ints(37 * 5, 1);
    w.write_i32("ints", ints.data(), 37, 5);
    w.write_f32("flat", good_.data(), 37, 0);
    w.write_f32("emb/vectors", good_.data(), 37, 5);
    w.close();
  }
  test::TempDir dir_;
  std::string path_;
  std::vector<float> good_;
};

TEST_F(CorpusIoErrors, MissingFile) {
  const std::string p = dir_.file("absent.h5");
  EXPECT_THAT(error_of([&] { read_rows(p, "train", RowRange{0, 1}); }),
              AllOf(HasSubstr("cannot open"), HasSubstr(p), HasSubstr("No such file")));
  EXPECT_THAT(error_of([&] { inspect_file(p); }), HasSubstr(p));
}

TEST_F(CorpusIoErrors, NotAnHdf5File) {
  const std::string p = dir_.file("text.h5");
  test::write_text(p, "this is not HDF5\n");
  EXPECT_THAT(error_of([&] { read_rows(p, "train", RowRange{0, 1}); }),
              AllOf(HasSubstr(p), HasSubstr("not a readable HDF5 file")));
}

TEST_F(CorpusIoErrors, TruncatedFile) {
  // A valid file cut to half its size (an interrupted copy).
  const std::string p = dir_.file("trunc.h5");
  const auto big = test::random_floats(400 * 16, 4);
  {
    H5Writer w(p);
    w.write_f32("train", big.data(), 400, 16);
  }
  test::truncate_to_half(p);
  const std::string msg = error_of([&] { read_rows(p, "train", RowRange{0, 400}); });
  EXPECT_THAT(msg, AllOf(HasSubstr(p), HasSubstr("truncated")));
  EXPECT_THAT(error_of([&] { inspect_file(p); }), HasSubstr(p));
}

TEST_F(CorpusIoErrors, MissingDatasetListsThosePresent) {
  const std::string msg = error_of([&] { read_rows(path_, "test", RowRange{0, 1}); });
  EXPECT_THAT(msg, AllOf(HasSubstr("has no dataset 'test'"), HasSubstr("datasets present:"), HasSubstr("train [37,5] float32"),
                         HasSubstr("ints [37,5] int32"), HasSubstr("emb/vectors")));
  EXPECT_THAT(error_of([&] { inspect_dataset(path_, "emb/nope"); }),
              AllOf(HasSubstr("has no dataset 'emb/nope'"), HasSubstr("emb/vectors")));
  EXPECT_THAT(error_of([&] { inspect_dataset(path_, "nope/deeper/still"); }), HasSubstr("'nope/deeper/still'"));
  EXPECT_THAT(error_of([&] { read_rows(path_, "emb", RowRange{0, 1}); }), HasSubstr("'emb' is not a dataset"));
}

TEST_F(CorpusIoErrors, OneDimensionalDataset) {
  EXPECT_THAT(error_of([&] { read_rows(path_, "flat", RowRange{0, 1}); }),
              AllOf(HasSubstr("'flat'"), HasSubstr("must be 2-D"), HasSubstr("1-D")));
  EXPECT_THAT(error_of([&] { read_matrix(path_, "flat"); }), HasSubstr("1-D"));
}

TEST_F(CorpusIoErrors, ThreeDimensionalDataset) {
  std::vector<double> v(4 * 3 * 2, 1.0);
  write_raw_dataset(path_, "cube", Disk::kF32, v, {4, 3, 2}, 0);
  EXPECT_THAT(error_of([&] { read_rows(path_, "cube", RowRange{0, 1}); }),
              AllOf(HasSubstr("'cube'"), HasSubstr("must be 2-D"), HasSubstr("3-D")));
}

TEST_F(CorpusIoErrors, ZeroColumns) {
  write_raw_dataset(path_, "nocols", Disk::kF32, {}, {5, 0}, 0);
  EXPECT_THAT(error_of([&] { read_rows(path_, "nocols", RowRange{0, 5}); }),
              AllOf(HasSubstr("'nocols'"), HasSubstr("dimension 0")));
}

TEST_F(CorpusIoErrors, NonFloatDtype) {
  EXPECT_THAT(error_of([&] { read_rows(path_, "ints", RowRange{0, 1}); }),
              AllOf(HasSubstr("'ints'"), HasSubstr("int32"), HasSubstr("expected float16, float32 or float64")));
  EXPECT_THAT(error_of([&] { read_int64_vector(path_, "flat"); }), HasSubstr("expected an integer type"));
  EXPECT_THAT(error_of([&] { read_int64_vector(path_, "ints"); }), HasSubstr("must be 1-D"));
}

TEST_F(CorpusIoErrors, NanAndInfNameTheGlobalRowAndColumn) {
  auto v = good_;
  v[30 * 5 + 2] = std::numeric_limits<float>::quiet_NaN();
  v[11 * 5 + 4] = -std::numeric_limits<float>::infinity();
  const std::string p = dir_.file("bad.h5");
  {
    H5Writer w(p);
    w.write_f32("train", v.data(), 37, 5, 4);
  }
  // rank 2 of 3 reads rows [25, 37): the message uses the global row number.
  EXPECT_THAT(error_of([&] { read_rows(p, "train", shard_rows(37, 3, 2), 3, {}, "corpus row"); }),
              AllOf(HasSubstr("corpus row 30 "), HasSubstr("nan"), HasSubstr("column 2"), HasSubstr(p)));
  EXPECT_THAT(error_of([&] { read_rows(p, "train", RowRange{5, 20}, 4, {}, "corpus row"); }),
              AllOf(HasSubstr("corpus row 11 "), HasSubstr("inf"), HasSubstr("column 4")));
  EXPECT_THAT(error_of([&] { read_matrix(p, "train", "query"); }), HasSubstr("query 11 "));
  // float64 on disk: a NaN survives the conversion and is caught.
  std::vector<double> d(6 * 3, 0.5);
  d[4 * 3 + 1] = std::numeric_limits<double>::infinity();
  write_raw_dataset(p, "f64", Disk::kF64, d, {6, 3}, 2);
  EXPECT_THAT(error_of([&] { read_rows(p, "f64", RowRange{0, 6}, 65536, {}, "corpus row"); }),
              AllOf(HasSubstr("corpus row 4 "), HasSubstr("column 1")));
}

TEST_F(CorpusIoErrors, RangeOutsideTheDataset) {
  EXPECT_THAT(error_of([&] { read_rows(path_, "train", RowRange{30, 40}); }),
              AllOf(HasSubstr("rows [30, 40)"), HasSubstr("37 rows")));
  EXPECT_THAT(error_of([&] { read_rows(path_, "train", RowRange{-1, 3}); }), HasSubstr("[-1, 3)"));
  EXPECT_THAT(error_of([&] { read_rows(path_, "train", RowRange{0, 3}, 0); }), HasSubstr("read chunk must be >= 1"));
}

TEST_F(CorpusIoErrors, EmptyRangeIsFine) {
  const HostMatrix m = read_rows(path_, "train", RowRange{37, 37});
  EXPECT_EQ(m.rows, 0);
  EXPECT_EQ(m.cols, 5);
}

// OS-level causes are named as such, not as a corrupt HDF5 file.
TEST_F(CorpusIoErrors, OsLevelCausesAreNamed) {
  EXPECT_THAT(error_of([&] { read_rows(dir_.path(), "train", RowRange{0, 1}); }),
              AllOf(HasSubstr("is a directory"), Not(HasSubstr("corrupt"))));
  EXPECT_THAT(error_of([&] { inspect_dataset(dir_.path() + "/", "train"); }), HasSubstr("is a directory"));
  EXPECT_THAT(error_of([&] { read_rows(path_ + "/x.h5", "train", RowRange{0, 1}); }),
              AllOf(HasSubstr("cannot open"), HasSubstr("Not a directory")));
  EXPECT_THAT(error_of([&] { read_rows("/dev/null", "train", RowRange{0, 1}); }),
              AllOf(HasSubstr("not a regular file"), HasSubstr("character device")));
  const std::string empty = dir_.file("empty.h5");
  test::write_text(empty, "");
  EXPECT_THAT(error_of([&] { read_rows(empty, "train", RowRange{0, 1}); }), HasSubstr("is empty (0 bytes)"));
}

TEST_F(CorpusIoErrors, PermissionDeniedIsNamed) {
  if (geteuid() == 0) GTEST_SKIP() << "skipped: running as root, file permissions are not enforced, EACCES cannot happen";
  const std::string p = dir_.file("locked.h5");
  {
    H5Writer w(p);
    w.write_f32("train", good_.data(), 37, 5);
  }
  ASSERT_EQ(chmod(p.c_str(), 0), 0);
  EXPECT_THAT(error_of([&] { read_rows(p, "train", RowRange{0, 1}); }),
              AllOf(HasSubstr("cannot open"), HasSubstr("Permission denied")));
}

// Finite values outside the storage type's range are "out of range", not "non-finite".
TEST_F(CorpusIoErrors, FiniteValuesOutOfRangeOfTheStorageType) {
  std::vector<double> d(6 * 3, 0.5);
  d[4 * 3 + 1] = 1e300;
  write_raw_dataset(path_, "big64", Disk::kF64, d, {6, 3}, 0);
  write_raw_dataset(path_, "big64gz", Disk::kF64, d, {6, 3}, 2);
  for (const char* ds : {"big64", "big64gz"}) {
    const std::string msg = error_of([&] { read_rows(path_, ds, RowRange{0, 6}, 65536, {}, "corpus row"); });
    EXPECT_THAT(msg, AllOf(HasSubstr("corpus row 4 "), HasSubstr("value 1e+300"), HasSubstr("column 1"),
                           HasSubstr("out of range of float32"), HasSubstr("3.40282e+38"), Not(HasSubstr("non-finite"))))
        << ds;
  }
  d[4 * 3 + 1] = -4e38;  // just past float32's largest finite value
  write_raw_dataset(path_, "big64b", Disk::kF64, d, {6, 3}, 0);
  EXPECT_THAT(error_of([&] { read_rows(path_, "big64b", RowRange{0, 6}); }),
              AllOf(HasSubstr("value -4e+38"), HasSubstr("out of range of float32")));
  // float32 on disk, float16 storage in the engine: 70000 does not fit (65504 is the largest).
  auto v = good_;
  v[7 * 5 + 3] = 70000.0f;
  v[9 * 5 + 0] = 65504.0f;  // fits
  const std::string p = dir_.file("f16range.h5");
  {
    H5Writer w(p);
    w.write_f32("train", v.data(), 37, 5);
  }
  ReadOptions opt;
  opt.label = "corpus row";
  EXPECT_NO_THROW(read_rows(p, "train", RowRange{0, 37}, opt));  // float32 storage: fine
  opt.storage = Dtype::kFloat16;
  EXPECT_THAT(error_of([&] { read_rows(p, "train", RowRange{0, 37}, opt); }),
              AllOf(HasSubstr("corpus row 7 "), HasSubstr("value 70000"), HasSubstr("column 3"),
                    HasSubstr("out of range of float16 (largest finite 65504)"),
                    HasSubstr("overflows float16, the storage type (engine.dtype)")));
  EXPECT_NO_THROW(read_rows(p, "train", RowRange{8, 37}, opt));
  opt.storage = Dtype::kFloat32;
  EXPECT_THAT(error_of([&] {
                read_row_blocks(p, "train", RowRange{0, 37}, RowFormat::kFloat16Bits, opt, [](const RowBlock&) {});
              }),
              AllOf(HasSubstr("corpus row 7 "), HasSubstr("out of range of float16")));
  v[7 * 5 + 3] = 3.4e38f;  // beyond bfloat16's largest finite value (3.3895e38)
  {
    H5Writer w(p);
    w.write_f32("train", v.data(), 37, 5);
  }
  opt.storage = Dtype::kBFloat16;
  EXPECT_THAT(error_of([&] { read_rows(p, "train", RowRange{0, 37}, opt); }),
              AllOf(HasSubstr("corpus row 7 "), HasSubstr("out of range of bfloat16")));
  // A NaN is still non-finite.
  d[4 * 3 + 1] = std::numeric_limits<double>::quiet_NaN();
  write_raw_dataset(path_, "nan64", Disk::kF64, d, {6, 3}, 0);
  EXPECT_THAT(error_of([&] { read_rows(path_, "nan64", RowRange{0, 6}); }), HasSubstr("non-finite value (nan)"));
}

// Unsigned ids above INT64_MAX are refused by name before any conversion clips them.
TEST_F(CorpusIoErrors, UnsignedIdsAboveInt64Max) {
  hid_t f = H5Fopen(path_.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  auto write_u = [&](const char* name, hid_t ftype, hid_t mtype, const void* data, int nd, const hsize_t* dims) {
    hid_t sp = H5Screate_simple(nd, dims, nullptr);
    hid_t ds = H5Dcreate2(f, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), 0);
    H5Dclose(ds);
    H5Sclose(sp);
  };
  const std::uint64_t big[5] = {0, 1, 2, (std::uint64_t{1} << 63) + 5, 4};
  const std::uint64_t fine[5] = {0, 1, 2, (std::uint64_t{1} << 63) - 2, 4};
  const std::uint32_t u32[5] = {0, 1, 4294967295u, 3, 4};
  const hsize_t n5 = 5, m32[2] = {5, 1};
  write_u("ids_big", H5T_STD_U64LE, H5T_NATIVE_UINT64, big, 1, &n5);
  write_u("ids_fine", H5T_STD_U64LE, H5T_NATIVE_UINT64, fine, 1, &n5);
  write_u("ids_u32", H5T_STD_U32LE, H5T_NATIVE_UINT32, u32, 1, &n5);
  write_u("nb_big", H5T_STD_U64LE, H5T_NATIVE_UINT64, big, 2, m32);
  H5Fclose(f);
  EXPECT_THAT(error_of([&] { read_int64_vector(path_, "ids_big"); }),
              AllOf(HasSubstr("'ids_big' is uint64"), HasSubstr("9223372036854775813 at index 3"),
                    HasSubstr("above the largest int64 id 9223372036854775807"), Not(HasSubstr("reserved"))));
  EXPECT_EQ(read_int64_vector(path_, "ids_fine")[3], INT64_MAX - 1);
  EXPECT_EQ(read_int64_vector(path_, "ids_u32")[2], 4294967295LL);
  std::int64_t r = 0, c = 0;
  EXPECT_THAT(error_of([&] { read_int64_matrix(path_, "nb_big", &r, &c); }),
              HasSubstr("9223372036854775813 at row 3, column 0"));
}

}  // namespace
}  // namespace shardtopk
