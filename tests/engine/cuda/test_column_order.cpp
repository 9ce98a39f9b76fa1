// kernels/column_order against the host: a column's rows sorted by value (int64 with negatives,
// the extremes and repeats; float64 with −0 and +0, ±inf and repeats (attributes hold no NaN); the global ids) and
// each range filter's interval of positions, compared with the rows a brute-force pass over the
// column finds in the range (bounds on, between and beyond the values, −0 bounds, NaN bounds,
// one-value ranges); a filter of another column or type gets every position.
//
// Every test skips, saying so, when no GPU is visible.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cuda_test_support.hpp"
#include "engine/cuda/kernels/column_order.hpp"
#include "engine/cuda/kernels/filter_table.cuh"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk::test {
namespace {

using cuda_detail::ColumnOrder;
using cuda_detail::ColumnOrderView;
using cuda_detail::QueryFilter;

std::uint64_t bits_of_double(double d) {
  std::uint64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

struct Table {
  std::vector<std::int64_t> ints, ids;
  std::vector<double> reals;
  AttributeTable table;
};

Table make_table(std::int64_t n) {
  Table t;
  std::mt19937_64 rng(71);
  const double specials[] = {-0.0, 0.0, std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(), 3.25, -3.25, 1.5, -1.5};
  const std::int64_t ispecials[] = {std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(),
                                    -1, 0, 1};
  for (std::int64_t r = 0; r < n; ++r) {
    t.ints.push_back(r % 7 == 0 ? ispecials[r % 5] : static_cast<std::int64_t>(rng() % 201) - 100);
    t.reals.push_back(r % 5 == 0 ? specials[r % 8] : static_cast<double>(static_cast<std::int64_t>(rng() % 401) - 200) / 8.0);
    t.ids.push_back(static_cast<std::int64_t>((static_cast<std::uint64_t>(r) * 2654435761u) % 1000003u) - 500000);
  }
  AttributeColumn a{"i", AttributeType::kInt64, t.ints, {}};
  AttributeColumn b{"x", AttributeType::kFloat64, {}, t.reals};
  t.table = AttributeTable({a, b}, t.ids, 0);
  return t;
}

/// The filters to try on column `column` (real or int): ranges over the values' span and beyond.
std::vector<QueryFilter> filters_for(int column, bool real) {
  std::vector<QueryFilter> out;
  auto add = [&](std::uint64_t lo, std::uint64_t hi) {
    QueryFilter f;
    f.kind = real ? QueryFilter::kRealRange : QueryFilter::kIntRange;
    f.column = column;
    f.lo = lo;
    f.hi = hi;
    out.push_back(f);
  };
  if (real) {
    const double inf = std::numeric_limits<double>::infinity();
    const double pairs[][2] = {{-0.0, 0.0}, {0.0, -0.0}, {-0.0, 3.0}, {-3.0, -0.0}, {-inf, inf}, {-inf, -inf},
                               {inf, inf},  {1.5, 1.5}, {1.51, 1.6}, {-25.0, 25.0}, {-1e300, -24.9}, {2.0, 1.0},
                               {std::nan(""), 1.0}, {-1.0, std::nan("")}, {0.125, 7.875}};
    for (const auto& p : pairs) add(bits_of_double(p[0]), bits_of_double(p[1]));
  } else {
    const std::int64_t lo = std::numeric_limits<std::int64_t>::min(), hi = std::numeric_limits<std::int64_t>::max();
    const std::int64_t pairs[][2] = {{lo, hi}, {lo, lo}, {hi, hi}, {-100, 100}, {0, 0}, {-1, 1}, {5, 4},
                                     {-500000, -400000}, {101, 1000}, {lo, -101}, {37, 37}};
    for (const auto& p : pairs) add(static_cast<std::uint64_t>(p[0]), static_cast<std::uint64_t>(p[1]));
  }
  return out;
}

void check_column(const Table& t, int column, bool real) {
  SCOPED_TRACE("column " + std::to_string(column) + (real ? " (float64)" : " (int64)"));
  use_test_device();
  cudaStream_t s = nullptr;
  DeviceFilterTableStorage dev(t.table, s);
  ColumnOrder order;
  ASSERT_TRUE(order.build(dev.table(), column, real, s));
  const ColumnOrderView v = order.view();
  const auto n = static_cast<std::int64_t>(t.ids.size());
  ASSERT_EQ(v.n, n);
  std::vector<std::uint64_t> keys(static_cast<std::size_t>(n));
  std::vector<std::int32_t> rows(static_cast<std::size_t>(n));
  CHECK_CUDA(cudaMemcpy(keys.data(), v.keys, sizeof(std::uint64_t) * keys.size(), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(rows.data(), v.rows, sizeof(std::int32_t) * rows.size(), cudaMemcpyDeviceToHost));
  auto value_bits = [&](std::int64_t r) {
    if (column == kFilterIdColumn) return static_cast<std::uint64_t>(t.ids[static_cast<std::size_t>(r)]);
    return real ? bits_of_double(t.reals[static_cast<std::size_t>(r)])
                : static_cast<std::uint64_t>(t.ints[static_cast<std::size_t>(r)]);
  };
  std::vector<bool> seen(static_cast<std::size_t>(n), false);
  for (std::int64_t p = 0; p < n; ++p) {
    const std::int32_t r = rows[static_cast<std::size_t>(p)];
    ASSERT_TRUE(r >= 0 && r < n && !seen[static_cast<std::size_t>(r)]) << "position " << p << ": row " << r;
    seen[static_cast<std::size_t>(r)] = true;
    const std::uint64_t b = value_bits(r);
    ASSERT_EQ(keys[static_cast<std::size_t>(p)], real ? cuda_detail::real_order_key(b) : cuda_detail::int_order_key(b));
    if (p > 0) ASSERT_LE(keys[static_cast<std::size_t>(p - 1)], keys[static_cast<std::size_t>(p)]) << p;
  }
  std::vector<QueryFilter> fs = filters_for(column, real);
  QueryFilter other = fs[0];
  other.column = column == 0 ? 1 : 0;  // another column: every position
  fs.push_back(other);
  QueryFilter none;
  fs.push_back(none);
  DeviceArray<QueryFilter> dfs(fs);
  DeviceArray<std::int64_t> dpos(2 * fs.size(), 0xFF);
  cuda_detail::range_positions(v, dfs.get(), static_cast<int>(fs.size()), dpos.get(), s);
  const std::vector<std::int64_t> pos = dpos.download();
  for (std::size_t i = 0; i < fs.size(); ++i) {
    SCOPED_TRACE("filter " + std::to_string(i));
    const QueryFilter& f = fs[i];
    const std::int64_t a = pos[2 * i], b = pos[2 * i + 1];
    if (i + 2 >= fs.size()) {
      EXPECT_EQ(a, 0);
      EXPECT_EQ(b, n);
      continue;
    }
    std::vector<std::int32_t> want, got;
    for (std::int64_t r = 0; r < n; ++r) {
      const std::uint64_t x = value_bits(r);
      bool in;
      if (real) {
        double xv, lo, hi;
        std::memcpy(&xv, &x, 8);
        std::memcpy(&lo, &f.lo, 8);
        std::memcpy(&hi, &f.hi, 8);
        in = lo <= xv && xv <= hi;
      } else {
        in = static_cast<std::int64_t>(f.lo) <= static_cast<std::int64_t>(x) &&
             static_cast<std::int64_t>(x) <= static_cast<std::int64_t>(f.hi);
      }
      if (in) want.push_back(static_cast<std::int32_t>(r));
    }
    ASSERT_LE(0, a);
    ASSERT_LE(a, b);
    ASSERT_LE(b, n);
    for (std::int64_t p = a; p < b; ++p) got.push_back(rows[static_cast<std::size_t>(p)]);
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, want) << "the interval [" << a << ", " << b << ") holds other rows than the range";
  }
}

TEST(ColumnOrder, IntColumnRanges) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const Table t = make_table(20011);
  check_column(t, 0, false);
}

TEST(ColumnOrder, FloatColumnRanges) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const Table t = make_table(20011);
  check_column(t, 1, true);
}

TEST(ColumnOrder, GlobalIdRanges) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  const Table t = make_table(5003);
  check_column(t, kFilterIdColumn, false);
}

TEST(ColumnOrder, ColumnOutsideTheTableIsRefused) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const Table t = make_table(100);
  DeviceFilterTableStorage dev(t.table, nullptr);
  ColumnOrder order;
  try {
    order.build(dev.table(), 2, false, nullptr);
    FAIL() << "column 2 of 2 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("column 2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(order.view().n, 0);
}

}  // namespace
}  // namespace shardtopk::test
