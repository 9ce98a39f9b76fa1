#pragma once
// Helpers shared by the filter sources (src/filter). Internal: not part of the public headers.
#include <cstdint>
#include <string>
#include <vector>

#include "shardtopk/filter.hpp"

namespace shardtopk {

/// A user-supplied name for a message: quoted, control characters escaped, cut after 64 bytes.
std::string quote_for_message(const std::string& s);

namespace filter_detail {

/// Checks a program completely against `schema` (opcodes, columns and their types, constant
/// offsets, strictly increasing sets, no NaN, ranges with lo <= hi, stack discipline, sizes).
/// @returns the evaluation stack depth it needs. @throws Error prefixed with `what`.
int check_program(const std::vector<FilterOp>& ops, const std::vector<std::int64_t>& ints,
                  const std::vector<double>& reals, const AttributeSchema& schema, const std::string& what);

}  // namespace filter_detail
}  // namespace shardtopk
