#pragma once
// Whole-string number parsing for text that users write (config values, --set overrides, HTTP
// query parameters), with messages that say what was wrong. Internal header.
#include <cstdint>
#include <string>

namespace shardtopk {

/// A decimal integer filling all of `v` (std::stoll's syntax). `what` names the source in
/// messages, e.g. "c.yaml: key 'search.k_max'" or "query parameter 'k'".
/// @throws Error "<what>: expected an integer, got '<v>'", or "... is beyond the 64-bit integer
///   range" for digits that do not fit.
long long parse_integer(const std::string& v, const std::string& what);

/// A decimal floating-point number filling all of `v` (std::stod's syntax).
/// @throws Error "<what>: expected a number, got '<v>'", or "... is beyond the double range".
double parse_number(const std::string& v, const std::string& what);

/// Whether an integer is a float64 value exactly (every one up to 2^53 in magnitude, larger
/// ones when their low bits are zero): a value for a float64 attribute, in a filter or a write,
/// must be, or it is refused as "not exactly representable as a float64".
bool exactly_float64(std::int64_t v);
bool exactly_float64(std::uint64_t v);

}  // namespace shardtopk
