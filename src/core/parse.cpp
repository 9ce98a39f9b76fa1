#include "core/parse.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "shardtopk/error.hpp"

namespace shardtopk {

namespace {
template <typename T, typename F>
T parse_whole(const std::string& v, const std::string& what, const char* kind, const char* range, F convert) {
  std::size_t pos = 0;
  T x{};
  // std::sto* skip leading blanks and std::stod reads hexadecimal ("0x10" is 16): neither is a
  // number as written in a config or a command line, so both are refused.
  const bool plain = !v.empty() && !std::isspace(static_cast<unsigned char>(v.front())) &&
                     v.find_first_of("xX") == std::string::npos;
  if (plain) try {
    x = convert(v, &pos);
  } catch (const std::out_of_range&) {
    throw Error(detail::concat(what, ": '", v, "' is beyond the ", range, " range"));
  } catch (const std::exception&) {
    pos = 0;
  }
  SHARDTOPK_EXPECTS(plain && pos == v.size(), what, ": expected ", kind, ", got '", v, "'");
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

namespace {
std::string lower(const std::string& s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

// Optimal string alignment distance (Damerau–Levenshtein without repeated edits of one span).
std::size_t edit_distance(const std::string& a, const std::string& b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i)
    for (std::size_t j = 1; j <= m; ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}
}  // namespace

std::string closest_name(const std::string& name, const std::vector<std::string>& known) {
  const std::size_t limit = name.size() <= 4 ? 1 : name.size() <= 8 ? 2 : 3;
  const std::string lname = lower(name);
  std::string best;
  std::size_t best_d = limit + 1;
  for (const std::string& k : known) {
    const std::size_t d = edit_distance(lname, lower(k));
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  return best;
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
