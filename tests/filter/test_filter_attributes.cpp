// Where attribute columns come from: one rank's rows of HDF5 datasets (every refusal by name,
// data never written) and the corpus.attributes config key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <hdf5.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "filter_support.hpp"
#include "filter_tables.hpp"
#include "shardtopk/config.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

using ::testing::HasSubstr;
using test::error_of;
using test::json;
using namespace filter_test;

// ------------------------------------------------------------------------------ HDF5

class AttributeFile : public ::testing::Test {
 protected:
  static constexpr std::int64_t kRows = 3000;
  void SetUp() override {
    path_ = dir_.file("attrs.h5");
    ints_.resize(kRows);
    reals_.resize(kRows);
    for (std::int64_t r = 0; r < kRows; ++r) {
      ints_[static_cast<std::size_t>(r)] = r * 1000003 - 7;
      reals_[static_cast<std::size_t>(r)] = r * 0.25 - 100.0;
    }
    std::vector<std::int32_t> i32(kRows, 1);
    std::vector<float> f32(kRows, 1.0f), two_d(kRows * 2, 1.0f);
    std::vector<double> with_nan = reals_;
    with_nan[2500] = std::nan("");
    H5Writer w(path_);
    w.write_i64("tenant", ints_.data(), kRows, 0);
    w.write_f64("meta/price", reals_.data(), kRows, 0);
    w.write_i32("tag32", i32.data(), kRows, 0);
    w.write_f32("f32", f32.data(), kRows, 0);
    std::vector<std::uint8_t> u8(kRows, 200);
    w.write_u8("u8", u8.data(), kRows, 0);
    w.write_strings("names", std::vector<std::string>(kRows, "x"));
    w.write_f32("two_d", two_d.data(), kRows, 2);
    w.write_i64("short", ints_.data(), kRows - 1, 0);
    w.write_f64("nan_late", with_nan.data(), kRows, 0);
    w.write_i64("meta/tenant", ints_.data(), kRows, 0);
    w.close();
  }
  test::TempDir dir_;
  std::string path_;
  std::vector<std::int64_t> ints_;
  std::vector<double> reals_;
};

TEST_F(AttributeFile, ReadsOneRanksRows) {
  for (RowRange range : {RowRange{0, kRows}, RowRange{1000, 2001}, RowRange{2999, 3000}, RowRange{5, 5}}) {
    const auto cols = read_attribute_columns(path_, {"tenant", "/meta/price"}, kRows, range);
    ASSERT_EQ(cols.size(), 2u);
    EXPECT_EQ(cols[0].name, "tenant");
    EXPECT_EQ(cols[0].type, AttributeType::kInt64);
    EXPECT_EQ(cols[1].name, "price");
    EXPECT_EQ(cols[1].type, AttributeType::kFloat64);
    EXPECT_EQ(cols[0].ints, std::vector<std::int64_t>(ints_.begin() + range.lo, ints_.begin() + range.hi));
    EXPECT_EQ(cols[1].reals, std::vector<double>(reals_.begin() + range.lo, reals_.begin() + range.hi));
    EXPECT_TRUE(cols[0].reals.empty());
    EXPECT_TRUE(cols[1].ints.empty());
  }
  EXPECT_TRUE(read_attribute_columns(path_, {}, kRows, {0, kRows}).empty());
  // narrower integers and float32 are widened exactly (uint8 200 stays 200, not -56)
  const auto narrow = read_attribute_columns(path_, {"tag32", "u8", "f32"}, kRows, {10, 20});
  ASSERT_EQ(narrow.size(), 3u);
  EXPECT_EQ(narrow[0].type, AttributeType::kInt64);
  EXPECT_EQ(narrow[0].ints, std::vector<std::int64_t>(10, 1));
  EXPECT_EQ(narrow[1].ints, std::vector<std::int64_t>(10, 200));
  EXPECT_EQ(narrow[2].type, AttributeType::kFloat64);
  EXPECT_EQ(narrow[2].reals, std::vector<double>(10, 1.0));
  // the NaN lies outside these rows: a rank reads only its own
  EXPECT_EQ(read_attribute_columns(path_, {"nan_late"}, kRows, {0, 2500})[0].reals.size(), 2500u);
  // a table from what was read, with the shard's global ids
  auto cols = read_attribute_columns(path_, {"tenant", "meta/price"}, kRows, {1000, 3000});
  std::vector<std::int64_t> ids(2000);
  for (int i = 0; i < 2000; ++i) ids[static_cast<std::size_t>(i)] = 1000 + i;
  const AttributeTable t(std::move(cols), ids);
  // global row g has price g / 4 - 100: ids 1500 and 2999 pass, id 1000 (price 150) does not
  const FilterProgram p = parse_filter(
      R"({"all": [{"ids_in": [1000, 1500, 2999]}, {"range": {"price": [150.25, null]}}]})", t.schema());
  std::vector<std::int64_t> got;
  for (std::int64_t r = 0; r < t.rows(); ++r)
    if (passes(p, t, r)) got.push_back(r);
  EXPECT_EQ(got, (std::vector<std::int64_t>{500, 1999}));
}

TEST_F(AttributeFile, RefusesBadDatasetsByName) {
  auto err = [&](std::vector<std::string> ds, RowRange range = {0, kRows}, std::int64_t n = kRows) {
    return error_of([&] { (void)read_attribute_columns(path_, ds, n, range); });
  };
  EXPECT_THAT(err({"tenant", "nope"}), HasSubstr("has no dataset 'nope' (datasets present: "));
  EXPECT_THAT(err({"tenant", "nope"}), HasSubstr("tenant [3000] int64"));
  EXPECT_THAT(err({"names"}), HasSubstr("attribute dataset 'names' is string; attributes must be integers that fit int64"));
  EXPECT_THAT(err({"names"}), HasSubstr("f['names_i64'] = f['names'][:].astype('int64')"));
  EXPECT_THAT(err({"two_d"}), HasSubstr("attribute dataset 'two_d' must be 1-D [3000], but it is 2-D"));
  EXPECT_THAT(err({"short"}), HasSubstr("attribute dataset 'short' has 2999 values, but the corpus has 3000 rows"));
  EXPECT_THAT(err({"nan_late"}), HasSubstr("attribute dataset 'nan_late' is NaN at row 2500"));
  EXPECT_THAT(err({"nan_late"}, {2000, 3000}), HasSubstr("NaN at row 2500"));
  EXPECT_THAT(err({"tenant", "meta/tenant"}), HasSubstr("two attribute datasets are named 'tenant'"));
  EXPECT_THAT(err({"meta"}), HasSubstr("'meta' is not a dataset"));  // a group
  EXPECT_THAT(err({"tenant"}, {0, kRows + 1}), HasSubstr("attribute rows [0, 3001) are outside the corpus's 3000 rows"));
  EXPECT_THAT(err({"/"}), HasSubstr("attribute dataset path '/' names no dataset"));
  EXPECT_THAT(error_of([&] { (void)read_attribute_columns(dir_.file("missing.h5"), {"tenant"}, kRows, {0, 1}); }),
              HasSubstr("No such file or directory"));
}

TEST_F(AttributeFile, RefusesDataNeverWritten) {
  // A dataset created and never written reads as its fill value: refused, naming the rows.
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t f = H5Fopen(path_.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hsize_t n = kRows, chunk = 1000;
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  const hid_t ds = H5Dcreate2(f, "unwritten", H5T_NATIVE_INT64, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(ds, 0);
  H5Dclose(ds);
  // chunked, with only the chunk of rows 1000 .. 1999 written
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 1, &chunk);
  const hid_t part = H5Dcreate2(f, "partial", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(part, 0);
  const hsize_t start = 1000;
  const hid_t fs = H5Dget_space(part);
  H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, nullptr, &chunk, nullptr);
  const hid_t ms = H5Screate_simple(1, &chunk, nullptr);
  std::vector<double> ones(1000, 1.0);
  ASSERT_GE(H5Dwrite(part, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, ones.data()), 0);
  H5Sclose(ms);
  H5Sclose(fs);
  H5Dclose(part);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(f);
  EXPECT_THAT(error_of([&] { (void)read_attribute_columns(path_, {"unwritten"}, kRows, {0, 10}); }),
              HasSubstr("'unwritten' has no data written"));
  EXPECT_EQ(read_attribute_columns(path_, {"partial"}, kRows, {1000, 2000})[0].reals, ones);
  EXPECT_THAT(error_of([&] { (void)read_attribute_columns(path_, {"partial"}, kRows, {1500, 2500}); }),
              HasSubstr("rows 2000 .. 2499 were never written (the chunk at row 2000 is not allocated)"));
}

// ------------------------------------------------------------------------------ config

TEST(AttributeConfig, ListFromYamlAndFromOverrides) {
  Config c = parse_config("corpus:\n  path: x.h5\n  attributes: [tenant, meta/year]\n");
  EXPECT_EQ(c.corpus.attributes, (std::vector<std::string>{"tenant", "meta/year"}));
  c = parse_config("corpus:\n  path: x.h5\n  attributes:\n    - tenant\n    - /meta/price\n");
  EXPECT_EQ(c.corpus.attributes, (std::vector<std::string>{"tenant", "/meta/price"}));
  EXPECT_TRUE(parse_config("corpus:\n  path: x.h5\n").corpus.attributes.empty());
  EXPECT_TRUE(parse_config("corpus:\n  path: x.h5\n  attributes: []\n").corpus.attributes.empty());
  apply_override(c, "corpus.attributes=a, b/c");
  EXPECT_EQ(c.corpus.attributes, (std::vector<std::string>{"a", "b/c"}));
  apply_override(c, "corpus.attributes=");
  EXPECT_TRUE(c.corpus.attributes.empty());
  // a YAML flow list on the command line, names quoted or not
  apply_override(c, "corpus.attributes=[train_labels]");
  EXPECT_EQ(c.corpus.attributes, (std::vector<std::string>{"train_labels"}));
  apply_override(c, "corpus.attributes= [tenant, \"meta/year\", 'p'] ");
  EXPECT_EQ(c.corpus.attributes, (std::vector<std::string>{"tenant", "meta/year", "p"}));
  apply_override(c, "corpus.attributes=[]");
  EXPECT_TRUE(c.corpus.attributes.empty());
  // to_yaml writes it back
  c.corpus.attributes = {"tenant", "meta/year"};
  EXPECT_EQ(parse_config(to_yaml(c)).corpus.attributes, c.corpus.attributes);
}

TEST(AttributeConfig, BadListsAreRefusedByName) {
  auto err = [](const std::string& yaml) { return error_of([&] { (void)parse_config(yaml, "c.yaml"); }); };
  EXPECT_THAT(err("corpus:\n  attributes: [tenant, meta/tenant]\n"),
              HasSubstr("key 'corpus.attributes': 'tenant' and 'meta/tenant' are both named 'tenant'"));
  EXPECT_THAT(err("corpus:\n  attributes: [tenant, {a: 1}]\n"), HasSubstr("key 'corpus.attributes': item 2 is not a dataset path"));
  EXPECT_THAT(err("corpus:\n  attributes: [tenant, '']\n"), HasSubstr("item 2 is not a dataset path"));
  EXPECT_THAT(err("corpus:\n  attributes: ['a,b']\n"), HasSubstr("dataset path 'a,b' contains a comma"));
  EXPECT_THAT(err("corpus:\n  attributes: [/]\n"), HasSubstr("has an empty dataset path"));
  Config c;
  EXPECT_THAT(error_of([&] { apply_override(c, "corpus.attributes=a,,b"); }), HasSubstr("'a,,b' has an empty dataset path"));
  EXPECT_THAT(error_of([&] { apply_override(c, "corpus.attributes=a,"); }), HasSubstr("'a,' ends with a comma"));
  for (const char* unmatched : {"[a,b", "a,b]", "[", "]"})
    EXPECT_THAT(error_of([&] { apply_override(c, std::string("corpus.attributes=") + unmatched); }),
                HasSubstr("'" + std::string(unmatched) + "' has an unmatched bracket"));
  std::string many;
  for (int i = 0; i <= kFilterMaxAttributes; ++i) many += (i ? "," : "") + std::string("c") + std::to_string(i);
  EXPECT_THAT(error_of([&] { apply_override(c, "corpus.attributes=" + many); }), HasSubstr("65 attributes, at most 64"));
  EXPECT_TRUE(c.corpus.attributes.empty());  // nothing changed by the refused overrides
  apply_override(c, "corpus.attributes=[tenant, meta/year]");
  EXPECT_EQ(c.corpus.attributes, (std::vector<std::string>{"tenant", "meta/year"}));
}

}  // namespace
}  // namespace shardtopk
