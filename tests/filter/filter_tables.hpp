#pragma once
// The tables and helpers the filter suites share: a hand-made table with exact expectations and
// the host evaluation's answers as rows and mask words.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "shardtopk/filter.hpp"

namespace shardtopk::filter_test {

inline const AttributeSchema kSchema = {
    {"tenant", AttributeType::kInt64}, {"year", AttributeType::kInt64}, {"price", AttributeType::kFloat64}};

// A small table with hand-picked values, for exact expectations.
//   row  id   tenant year  price
//   0    100  7      2018  1.5
//   1    101  7      2019  -0.0
//   2    102  8      2024  0.0
//   3    103  9      2025  2.5
//   4    104  7      2021  1e300
inline AttributeTable small_table() {
  return AttributeTable({{"tenant", AttributeType::kInt64, {7, 7, 8, 9, 7}, {}},
                         {"year", AttributeType::kInt64, {2018, 2019, 2024, 2025, 2021}, {}},
                         {"price", AttributeType::kFloat64, {}, {1.5, -0.0, 0.0, 2.5, 1e300}}},
                        {100, 101, 102, 103, 104});
}

inline std::vector<std::int64_t> passing_rows(const std::string& filter, const AttributeTable& t) {
  const FilterProgram p = parse_filter(filter, t.schema());
  std::vector<std::int64_t> out;
  for (std::int64_t r = 0; r < t.rows(); ++r)
    if (passes(p, t, r)) out.push_back(r);
  return out;
}

inline std::vector<std::uint32_t> mask_of(const FilterProgram& p, const AttributeTable& t, RowRange rows,
                                   std::vector<std::uint8_t>* flags = nullptr, int threads = 1) {
  std::vector<std::uint32_t> bits(static_cast<std::size_t>(filter_mask_words(rows.size())) + 1, 0xdeadbeefu);
  if (flags && rows.size() > 0)
    flags->assign(static_cast<std::size_t>((rows.hi - 1) / kFilterBlockRows - rows.lo / kFilterBlockRows + 1), 99);
  evaluate_mask(p, t, rows, bits.data(), flags ? flags->data() : nullptr, threads);
  EXPECT_EQ(bits.back(), 0xdeadbeefu) << "evaluate_mask wrote past its words";
  bits.pop_back();
  return bits;
}

inline bool bit(const std::vector<std::uint32_t>& bits, std::int64_t i) {
  return (bits[static_cast<std::size_t>(i / 32)] >> (i % 32)) & 1u;
}

}  // namespace shardtopk::filter_test
