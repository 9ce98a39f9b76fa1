// Data HDF5 would make up is refused before a row is read: virtual datasets with missing or
// short sources or unmapped rows, external files missing or short, chunks and storage never
// written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
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
using ::testing::HasSubstr;
using ::testing::Not;
using test::error_of;
using test::write_with_dcpl;

// HDF5 indirection that hides missing data: virtual datasets (and, below, external files and
// storage never written).
class HiddenMissingData : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = dir_.file("src_a.h5");
    vals_.resize(300 * 4);
    for (size_t i = 0; i < vals_.size(); ++i) vals_[i] = static_cast<double>(i % 97) - 40.0;
    write_with_dcpl(src_, "data", H5T_IEEE_F32LE, 300, 4, H5P_DEFAULT, &vals_);
  }
  // A virtual [600, 4] 'train' in vds.h5: rows [0, 300) from src_a.h5 'data', rows [300, 600)
  // from `second` (file, dataset, rows it has), or unmapped when second_file is empty.
  std::string make_vds(const std::string& second_file, const std::string& second_ds, hsize_t second_rows) {
    const std::string vds = dir_.file("vds.h5");
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    const hsize_t vdims[2] = {600, 4};
    hid_t vspace = H5Screate_simple(2, vdims, nullptr);
    const hsize_t sdims[2] = {300, 4};
    hid_t sspace = H5Screate_simple(2, sdims, nullptr);
    hsize_t start[2] = {0, 0}, count[2] = {300, 4};
    H5Sselect_hyperslab(vspace, H5S_SELECT_SET, start, nullptr, count, nullptr);
    EXPECT_GE(H5Pset_virtual(dcpl, vspace, "src_a.h5", "data", sspace), 0);
    if (!second_file.empty()) {
      start[0] = 300;
      H5Sselect_hyperslab(vspace, H5S_SELECT_SET, start, nullptr, count, nullptr);
      (void)second_rows;
      EXPECT_GE(H5Pset_virtual(dcpl, vspace, second_file.c_str(), second_ds.c_str(), sspace), 0);
    }
    hid_t f = H5Fcreate(vds.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t ds = H5Dcreate2(f, "train", H5T_IEEE_F32LE, vspace, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    EXPECT_GE(ds, 0);
    H5Dclose(ds);
    H5Fclose(f);
    H5Sclose(sspace);
    H5Sclose(vspace);
    H5Pclose(dcpl);
    return vds;
  }
  // A [10, 4] float32 'train' in `h5` stored in the external files `a` and `b`, 5 rows (80
  // bytes) each; neither is written here.
  static void make_external(const std::string& h5, const std::string& a, const std::string& b) {
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_external(dcpl, a.c_str(), 0, 80);
    H5Pset_external(dcpl, b.c_str(), 0, 80);
    write_with_dcpl(h5, "train", H5T_IEEE_F32LE, 10, 4, dcpl, nullptr);
    H5Pclose(dcpl);
  }
  test::TempDir dir_;
  std::string src_;
  std::vector<double> vals_;
};

TEST_F(HiddenMissingData, VirtualDatasetWithAMissingSourceFile) {
  const std::string vds = make_vds("missing_b.h5", "data", 300);
  // Through libhdf5, rows 300-599 would come back as zeros. Refused, naming file and rows.
  EXPECT_THAT(error_of([&] { read_rows(vds, "train", RowRange{0, 600}); }),
              AllOf(HasSubstr("virtual dataset"), HasSubstr("rows [300, 600)"), HasSubstr("'missing_b.h5'"),
                    HasSubstr("does not exist"), HasSubstr("fill value")));
  // A rank whose rows all come from the present source reads them.
  const HostMatrix m = read_rows(vds, "train", RowRange{100, 300});
  for (size_t i = 0; i < m.data.size(); ++i) ASSERT_EQ(m.data[i], static_cast<float>(vals_[400 + i])) << i;
  EXPECT_THAT(error_of([&] { read_rows(vds, "train", RowRange{299, 301}); }), HasSubstr("'missing_b.h5'"));
}

TEST_F(HiddenMissingData, VirtualDatasetWithAMissingSourceDataset) {
  const std::string vds = make_vds("src_a.h5", "nope", 300);
  EXPECT_THAT(error_of([&] { read_rows(vds, "train", RowRange{0, 600}); }),
              AllOf(HasSubstr("rows [300, 600)"), HasSubstr("has no dataset 'nope'")));
}

TEST_F(HiddenMissingData, VirtualDatasetWhoseSourceIsTooShort) {
  std::vector<double> short_vals(120 * 4, 1.0);
  write_with_dcpl(dir_.file("short.h5"), "data", H5T_IEEE_F32LE, 120, 4, H5P_DEFAULT, &short_vals);
  const std::string vds = make_vds("short.h5", "data", 120);
  EXPECT_THAT(error_of([&] { read_rows(vds, "train", RowRange{0, 600}); }),
              AllOf(HasSubstr("rows [300, 600)"), HasSubstr("'short.h5'"), HasSubstr("is [120,4] (480 values)"),
                    HasSubstr("the mapping reads 1200 values")));
}

TEST_F(HiddenMissingData, VirtualDatasetWithUnmappedRows) {
  const std::string vds = make_vds("", "", 0);
  EXPECT_THAT(error_of([&] { read_rows(vds, "train", RowRange{250, 400}); }),
              AllOf(HasSubstr("rows [300, 400) are not mapped to any source"), HasSubstr("fill value")));
  EXPECT_NO_THROW(read_rows(vds, "train", RowRange{0, 300}));
}

// The files a dataset's bytes come from besides its own file (what an output must not replace):
// a virtual dataset's sources (relative names against the file's folder), external storage
// files, an external link's target; a dataset that does not exist adds nothing.
TEST_F(HiddenMissingData, DatasetFilesNameEveryFileTheBytesComeFrom) {
  auto same = [](const std::vector<std::string>& got, const std::vector<std::string>& want) {
    if (got.size() != want.size()) return false;
    for (size_t i = 0; i < got.size(); ++i)
      if (!std::filesystem::equivalent(got[i], want[i])) return false;
    return true;
  };
  const std::string vds = make_vds("src_a.h5", "data", 300);
  EXPECT_TRUE(same(dataset_files(vds, {"train", "absent"}), {src_}));

  const std::string ext = dir_.file("ext_files.h5");
  const std::string ext_a = dir_.file("ext_a.bin"), ext_b = dir_.file("ext_b.bin");
  for (const std::string& e : {ext_a, ext_b}) {
    std::FILE* fe = std::fopen(e.c_str(), "wb");
    ASSERT_NE(fe, nullptr);
    std::fclose(fe);
  }
  make_external(ext, ext_a, ext_b);
  EXPECT_TRUE(same(dataset_files(ext, {"train"}), {ext_a, ext_b}));

  const std::string link = dir_.file("link.h5");
  {
    const hid_t f = H5Fcreate(link.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    ASSERT_GE(H5Lcreate_external("src_a.h5", "data", f, "train", H5P_DEFAULT, H5P_DEFAULT), 0);
    H5Fclose(f);
  }
  EXPECT_TRUE(same(dataset_files(link, {"train", ""}), {src_}));
  EXPECT_TRUE(dataset_files(src_, {"data"}).empty());
}

TEST_F(HiddenMissingData, ExternalStorageFiles) {
  const std::string h5 = dir_.file("ext.h5");
  // [10, 4] float32 in two external files of 5 rows (80 bytes) each, the first one present.
  const std::string ext_a = dir_.file("ext_a.bin"), ext_b = dir_.file("ext_b.bin");
  std::vector<float> raw(20);
  for (int i = 0; i < 20; ++i) raw[i] = static_cast<float>(i) + 0.5f;
  {
    FILE* fa = std::fopen(ext_a.c_str(), "wb");
    ASSERT_NE(fa, nullptr);
    std::fwrite(raw.data(), 4, 20, fa);
    std::fclose(fa);
  }
  make_external(h5, ext_a, ext_b);
  const HostMatrix m = read_rows(h5, "train", RowRange{0, 5});
  EXPECT_EQ(m.data, raw);
  EXPECT_THAT(error_of([&] { read_rows(h5, "train", RowRange{0, 10}); }),
              AllOf(HasSubstr("rows [5, 10)"), HasSubstr("external file"), HasSubstr("ext_b.bin"),
                    HasSubstr("No such file or directory")));
  // Present but short: HDF5 would read zeros past its end.
  {
    FILE* fb = std::fopen(ext_b.c_str(), "wb");
    std::fwrite(raw.data(), 4, 6, fb);  // 24 of 80 bytes: rows 5 and part of 6
    std::fclose(fb);
  }
  EXPECT_THAT(error_of([&] { read_rows(h5, "train", RowRange{3, 10}); }),
              AllOf(HasSubstr("ext_b.bin"), HasSubstr("holds 24 bytes but must hold 80"),
                    HasSubstr("HDF5 would return zeros for rows [6, 10)")));
}

TEST_F(HiddenMissingData, ChunksNeverWritten) {
  // [40, 3] in chunks of 8 rows; only rows [0, 16) written: chunks from row 16 are not allocated.
  const std::string p = dir_.file("holes.h5");
  for (bool deflate : {false, true}) {
    const std::string name = deflate ? "gz" : "plain";
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    const hsize_t chunk[2] = {8, 3};
    H5Pset_chunk(dcpl, 2, chunk);
    if (deflate) H5Pset_deflate(dcpl, 1);
    write_with_dcpl(p, name, H5T_IEEE_F32LE, 40, 3, dcpl, nullptr);
    H5Pclose(dcpl);
    hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
    hid_t fs = H5Dget_space(ds);
    const hsize_t start[2] = {0, 0}, count[2] = {16, 3};
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, nullptr, count, nullptr);
    hid_t ms = H5Screate_simple(2, count, nullptr);
    std::vector<double> v(48, 2.0);
    ASSERT_GE(H5Dwrite(ds, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, v.data()), 0);
    H5Sclose(ms);
    H5Sclose(fs);
    H5Dclose(ds);
    H5Fclose(f);
    EXPECT_THAT(error_of([&] { read_rows(p, name, RowRange{0, 40}); }),
                AllOf(HasSubstr("rows [16, 24) were never written"), HasSubstr("not allocated"),
                      HasSubstr("fill value (0)")))
        << name;
    EXPECT_THAT(error_of([&] { read_rows(p, name, RowRange{30, 35}); }), HasSubstr("rows [30, 32) were never written"));
    EXPECT_EQ(read_rows(p, name, RowRange{0, 16}).data, std::vector<float>(48, 2.0f));
  }
  // Contiguous storage never written (late allocation, no write).
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_LATE);
  write_with_dcpl(p, "empty", H5T_IEEE_F32LE, 10, 3, dcpl, nullptr);
  H5Pclose(dcpl);
  EXPECT_THAT(error_of([&] { read_rows(p, "empty", RowRange{2, 5}); }),
              AllOf(HasSubstr("'empty' has no data written"), HasSubstr("rows [2, 5)")));
}

}  // namespace
}  // namespace shardtopk
