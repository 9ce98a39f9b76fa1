#include "core/parse.hpp"

#include <stdexcept>

#include "shardtopk/error.hpp"

namespace shardtopk {

namespace {
template <typename T, typename F>
T parse_whole(const std::string& v, const std::string& what, const char* kind, const char* range, F convert) {
  std::size_t pos = 0;
  T x{};
  try {
    x = convert(v, &pos);
  } catch (const std::out_of_range&) {
    throw Error(detail::concat(what, ": '", v, "' is beyond the ", range, " range"));
  } catch (const std::exception&) {
    pos = 0;
  }
  SHARDTOPK_EXPECTS(!v.empty() && pos == v.size(), what, ": expected ", kind, ", got '", v, "'");
  return x;
}
}  // namespace

long long parse_integer(const std::string& v, const std::string& what) {
  return parse_whole<long long>(v, what, "an integer", "64-bit integer",
                                [](const std::string& s, std::size_t* p) { return std::stoll(s, p); });
}

double parse_number(const std::string& v, const std::string& what) {
  return parse_whole<double>(v, what, "a number", "double",
                             [](const std::string& s, std::size_t* p) { return std::stod(s, p); });
}

bool exactly_float64(std::int64_t v) {
  const double d = static_cast<double>(v);
  return d < 0x1p63 && static_cast<std::int64_t>(d) == v;
}

bool exactly_float64(std::uint64_t v) {
  const double d = static_cast<double>(v);
  return d < 0x1p64 && static_cast<std::uint64_t>(d) == v;
}

}  // namespace shardtopk
