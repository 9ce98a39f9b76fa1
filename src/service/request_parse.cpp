#include "service/request_parse.hpp"

#include <cmath>
#include <cstring>
#include <strings.h>
#include <limits>

#include "core/parse.hpp"
#include "shardtopk/error.hpp"

static_assert(sizeof(float) == 4, "binary protocol: float32");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the binary protocol copies little-endian rows as they are: big-endian hosts need byte swaps"
#endif

namespace shardtopk::service {
namespace {

std::uint32_t load_u32(const char* p, bool swap) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return swap ? __builtin_bswap32(v) : v;
}

const char* dtype_name(std::uint32_t code) {
  switch (static_cast<BinaryDtype>(code)) {
    case BinaryDtype::kFloat32: return "float32";
    case BinaryDtype::kFloat64: return "float64";
    case BinaryDtype::kFloat16: return "float16";
    case BinaryDtype::kBFloat16: return "bfloat16";
  }
  return nullptr;
}

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

}  // namespace

SearchBody parse_binary_search(std::string_view body, const QueryShape& shape) {
  SearchBody out;
  std::string_view rows = body;
  const std::size_t row_bytes = static_cast<std::size_t>(shape.dim) * 4;
  long long header_rows = -1;
  if (body.size() >= 4 && std::memcmp(body.data(), kBinaryMagic, 4) == 0) {
    SHARDTOPK_EXPECTS(body.size() >= kBinaryHeaderBytes, "binary header: the body has ", body.size(),
                      " bytes, the header alone takes ", kBinaryHeaderBytes);
    const char* h = body.data();
    const std::uint32_t bom = load_u32(h + 4, false);
    SHARDTOPK_EXPECTS(bom == 0x01020304u || bom == 0x04030201u, "binary header: byte-order mark 0x", std::hex, bom,
                      " is neither 0x01020304 (little-endian) nor its byte swap");
    SHARDTOPK_EXPECTS(bom == 0x01020304u, "binary header: the body is big-endian; send little-endian float32 rows");
    const std::uint32_t dtype = load_u32(h + 8, false);
    const char* name = dtype_name(dtype);
    SHARDTOPK_EXPECTS(name != nullptr, "binary header: unknown dtype code ", dtype, " (1 = float32)");
    SHARDTOPK_EXPECTS(static_cast<BinaryDtype>(dtype) == BinaryDtype::kFloat32, "binary header: dtype ", name,
                      " is not supported; send float32 rows (dtype code 1)");
    const std::uint32_t hrows = load_u32(h + 12, false), hdim = load_u32(h + 16, false);
    SHARDTOPK_EXPECTS(hdim == shape.dim, "binary header: dim ", hdim, " but the index has dimension ", shape.dim);
    for (std::size_t i = 20; i < kBinaryHeaderBytes; ++i)
      SHARDTOPK_EXPECTS(h[i] == 0, "binary header: reserved byte ", i, " is not zero");
    rows = body.substr(kBinaryHeaderBytes);
    SHARDTOPK_EXPECTS(rows.size() == static_cast<std::size_t>(hrows) * row_bytes, "binary header: ", hrows,
                      " rows of dim ", hdim, " take ", static_cast<std::size_t>(hrows) * row_bytes,
                      " bytes, the body holds ", rows.size(), " after the header");
    header_rows = hrows;
  }
  SHARDTOPK_EXPECTS(!rows.empty(), "empty query list: the body holds no float32 rows");
  SHARDTOPK_EXPECTS(rows.size() % row_bytes == 0, "binary body of ", rows.size(),
                    " bytes is not a multiple of 4 x dim = ", row_bytes, " bytes (dim ", shape.dim, ")");
  const long long nq = static_cast<long long>(rows.size() / row_bytes);
  (void)header_rows;
  SHARDTOPK_EXPECTS(nq <= shape.batch_max, nq, " queries in one request exceed search.batch_max = ", shape.batch_max,
                    "; split the request");
  out.nq = static_cast<int>(nq);
  out.queries.resize(static_cast<std::size_t>(nq) * static_cast<std::size_t>(shape.dim));
  std::memcpy(out.queries.data(), rows.data(), rows.size());
  return out;
}

std::string binary_header(std::uint32_t rows, std::uint32_t dim) {
  std::string h(kBinaryHeaderBytes, '\0');
  std::memcpy(&h[0], kBinaryMagic, 4);
  const std::uint32_t fields[4] = {0x01020304u, static_cast<std::uint32_t>(BinaryDtype::kFloat32), rows, dim};
  std::memcpy(&h[4], fields, sizeof fields);
  return h;
}

Media parse_media_type(std::string_view ct) {
  const std::size_t semi = ct.find(';');
  std::string_view m = ct.substr(0, semi);
  while (!m.empty() && (m.front() == ' ' || m.front() == '\t')) m.remove_prefix(1);
  while (!m.empty() && (m.back() == ' ' || m.back() == '\t')) m.remove_suffix(1);
  if (m.empty()) return Media::kNone;
  if (iequals(m, "application/json")) return Media::kJson;
  if (iequals(m, "application/octet-stream")) return Media::kBinary;
  return Media::kOther;
}

BodyLimits derived_body_limits(std::int64_t dim, int batch_max) {
  BodyLimits l;
  const std::size_t values = static_cast<std::size_t>(dim) * static_cast<std::size_t>(batch_max);
  l.binary = kBinaryHeaderBytes + values * 4;
  l.json = values * 32 + static_cast<std::size_t>(batch_max) * 16 + 4096 + kFilterBodyBytes;
  return l;
}

namespace {

std::string flatten(std::string_view s, std::size_t max, bool keep_backslash) {
  std::string out;
  const std::size_t n = s.size() < max ? s.size() : max;
  out.reserve(n + 32);
  static const char* hex = "0123456789abcdef";
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && (c != '\\' || keep_backslash)) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (n < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

}  // namespace

std::string excerpt(std::string_view s, std::size_t max) { return flatten(s, max, false); }

std::string excerpt_message(std::string_view s, std::size_t max) { return flatten(s, max, true); }

std::pair<int, std::string> framing_problem(int content_lengths, int transfer_encodings, std::string_view te) {
  if (content_lengths > 1) return {400, "Content-Length given more than once"};
  if (transfer_encodings == 0) return {0, ""};
  if (content_lengths > 0)
    return {400, "both Transfer-Encoding and Content-Length given: the body's length is ambiguous (RFC 9112 6.3); "
                 "send one of them"};
  if (transfer_encodings > 1) return {400, "Transfer-Encoding given more than once"};
  const auto trim = [](std::string_view t) {
    const auto a = t.find_first_not_of(" \t"), b = t.find_last_not_of(" \t");
    return a == std::string_view::npos ? std::string() : std::string(t.substr(a, b - a + 1));
  };
  const auto is_chunked = [](const std::string& t) { return strcasecmp(t.c_str(), "chunked") == 0; };
  const std::string v = trim(te);
  if (is_chunked(v)) {
    if (is_chunked(std::string(te))) return {0, ""};
    return {400, "Transfer-Encoding '" + excerpt(te, 48) + "': white space around the coding (send exactly 'chunked')"};
  }
  const std::string shown = "Transfer-Encoding '" + excerpt(v, 48) + "'";
  const auto comma = v.rfind(',');
  if (!is_chunked(trim(comma == std::string::npos ? std::string_view(v) : std::string_view(v).substr(comma + 1))))
    return {400, shown + ": the body's length cannot be determined (the final coding must be chunked, RFC 9112 6.3)"};
  return {501, shown + " not implemented: only chunked is understood"};
}

long long parse_int_param(std::string_view name, std::string_view value) {
  const std::string what = "query parameter '" + std::string(name) + "'";
  // Decimal digits only (every integer parameter is positive); std::stoll alone would also take
  // a sign and leading white space. A NUL byte (%00) is not a digit either.
  SHARDTOPK_EXPECTS(value.size() <= 32 && !value.empty() && value.find_first_not_of("0123456789") == std::string_view::npos,
                    what, ": expected a positive integer (decimal digits only), got '", excerpt(value, 32), "'");
  return parse_integer(std::string(value), what);
}

}  // namespace shardtopk::service
