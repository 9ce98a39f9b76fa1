#include "service/request_parse.hpp"

#include <cmath>
#include <cstring>
#include <strings.h>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "core/parse.hpp"
#include "shardtopk/error.hpp"

static_assert(sizeof(float) == 4, "binary protocol: float32");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the binary protocol copies little-endian rows as they are: big-endian hosts need byte swaps"
#endif

namespace shardtopk::service {
namespace {

using nlohmann::json;

constexpr std::size_t kMaxMessage = 200;  // longest library message a parse error may quote

constexpr std::size_t kMaxFilterMessage = 400;  // a filter's message lists the attributes it knows

// A message from the JSON library, made flat and short (its "last read" token is client bytes).
std::string flat(const std::string& s) { return excerpt(s, kMaxMessage); }

// A filter's JSON value built from parser events, within the bounds parse_filter (filter.hpp)
// keeps: at most 2 · kFilterMaxDepth + 1 open containers (a filter of depth d nests at most
// 2d + 1) and a budget of events (the lists' values plus a few per operator), each checked
// before the tree grows. A key repeated in one object is refused (a document tree would keep
// only the last one, silently).
class FilterTree {
 public:
  bool done() const { return done_; }
  const json& value() const { return root_; }
  const std::string& error() const { return error_; }

  bool start(bool object) { return add(object ? json::object() : json::array(), true); }
  bool end() {
    stack_.pop_back();
    done_ = stack_.empty();
    return true;
  }
  bool key(const std::string& k) {
    if (!count()) return false;
    if (stack_.back()->contains(k)) return fail("filter: key " + excerpt(k, 64) + " given twice in one object");
    key_ = k;
    return true;
  }
  bool scalar(json v) { return add(std::move(v), false); }

 private:
  static constexpr std::size_t kMaxOpen = 2 * kFilterMaxDepth + 1;
  static constexpr std::int64_t kMaxEvents = kFilterMaxValues + 16 * kFilterMaxNodes;

  bool fail(std::string m) {
    if (error_.empty()) error_ = std::move(m);
    return false;
  }
  bool count() {
    if (++events_ > kMaxEvents)
      return fail("filter: more than " + std::to_string(kFilterMaxValues) + " values in the lists of one filter");
    return true;
  }
  bool add(json v, bool container) {
    if (!count()) return false;
    if (container && stack_.size() >= kMaxOpen)
      return fail("filter: nested deeper than " + std::to_string(kFilterMaxDepth) + " levels");
    json* slot;
    if (stack_.empty()) {
      root_ = std::move(v);
      slot = &root_;
    } else if (stack_.back()->is_object()) {
      slot = &(*stack_.back())[key_];
      *slot = std::move(v);
    } else {
      // Only the innermost open container grows, and no pointer into it is kept.
      stack_.back()->push_back(std::move(v));
      slot = &stack_.back()->back();
    }
    if (container) stack_.push_back(slot);
    else done_ = stack_.empty();
    return true;
  }

  json root_;
  std::vector<json*> stack_;  // the open containers, outermost first
  std::string key_;
  std::int64_t events_ = 0;
  bool done_ = false;
  std::string error_;
};

// The compiled form of a built filter value (null: none; a filter passing every row: none).
RequestFilter compile_request_filter(const json& v, const AttributeSchema* attributes) {
  if (v.is_null()) return nullptr;
  static const AttributeSchema kNone;
  auto p = std::make_shared<FilterProgram>(compile_filter(v, attributes ? *attributes : kNone));
  if (p->passes_everything()) return nullptr;
  return p;
}

// The request body's grammar as events. The parser (nlohmann's SAX driver) keeps its own nesting
// on an explicit stack; this handler refuses every level the format does not have at its first
// token, so neither side ever holds deep nesting.
class SearchSax final : public nlohmann::json_sax<json> {
 public:
  SearchSax(const QueryShape& shape, SearchBody& out) : shape_(shape), out_(out) {}

  const std::string& error() const { return error_; }
  bool complete() const { return done_; }
  int rows_seen() const { return rows_; }
  bool saw_rows_field() const { return seen_.count("queries") || seen_.count("query"); }

  bool null() override { return filter_value() ? filter_scalar(nullptr) : value("null"); }
  bool boolean(bool b) override { return filter_value() ? filter_scalar(b) : value(b ? "true" : "false"); }
  bool number_integer(number_integer_t v) override {
    if (filter_value()) return filter_scalar(v);
    return number(static_cast<double>(v), nullptr, v, false);
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (filter_value()) return filter_scalar(v);
    if (v > static_cast<number_unsigned_t>(std::numeric_limits<long long>::max()))
      return number(static_cast<double>(v), nullptr, 0, true);
    return number(static_cast<double>(v), nullptr, static_cast<long long>(v), false);
  }
  bool number_float(number_float_t v, const string_t& text) override {
    if (filter_value()) return filter_scalar(v);
    return number(v, &text, 0, false);
  }
  bool string(string_t& s) override {
    if (filter_value()) return filter_scalar(std::move(s));
    return value("a string \"" + excerpt(s, 24) + "\"");
  }
  bool binary(binary_t&) override { return value("binary data"); }

  bool start_object(std::size_t) override {
    if (filter_value()) return filter_step(filter_.start(true));
    if (depth_ == 0 && !done_) {
      depth_ = 1;
      return true;
    }
    return value("an object");
  }
  bool end_object() override {
    if (in_filter_) return filter_step(filter_.end());
    depth_ = 0;
    done_ = true;
    return true;
  }

  bool key(string_t& k) override {
    if (in_filter_) return filter_.key(k) || fail(filter_.error());
    if (k != "queries" && k != "query" && k != "k" && k != "filter")
      return fail("unknown field \"" + excerpt(k, 32) + "\" (allowed: queries, query, k, filter)");
    if (!seen_.insert(k).second) return fail("duplicate key \"" + k + "\" in the request object");
    if (seen_.count("queries") && seen_.count("query"))
      return fail("give either \"queries\" (a list of vectors) or \"query\" (one vector), not both");
    field_ = k == "queries" ? Field::kQueries : k == "query" ? Field::kQuery : k == "k" ? Field::kK : Field::kFilter;
    return true;
  }

  bool start_array(std::size_t) override {
    if (filter_value()) return filter_step(filter_.start(false));
    if (depth_ == 1 && field_ == Field::kQueries) {  // the list of rows
      depth_ = 2;
      in_list_ = true;
      return true;
    }
    if ((depth_ == 1 && field_ == Field::kQuery) || (depth_ == 2 && in_list_)) {  // one row
      if (rows_ >= shape_.batch_max)
        return fail("more than search.batch_max = " + std::to_string(shape_.batch_max) +
                    " queries in one request; split the request");
      ++depth_;
      in_row_ = true;
      col_ = 0;
      row_error_.clear();
      out_.queries.resize(static_cast<std::size_t>(rows_ + 1) * static_cast<std::size_t>(shape_.dim));
      return true;
    }
    return value("a list");
  }

  bool end_array() override {
    if (in_filter_) return filter_step(filter_.end());
    if (in_row_) {
      in_row_ = false;
      --depth_;
      if (col_ != shape_.dim)
        return fail("query " + std::to_string(rows_) + " has dimension " + std::to_string(col_) +
                    " but the index has dimension " + std::to_string(shape_.dim));
      if (!row_error_.empty()) return fail(row_error_);
      ++rows_;
      if (!in_list_) field_ = Field::kNone;
      return true;
    }
    // the end of the list of rows
    in_list_ = false;
    depth_ = 1;
    field_ = Field::kNone;
    if (rows_ == 0) return fail("empty query list: send at least one query");
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    if (error_.empty()) error_ = "malformed JSON: " + flat(ex.what());
    return false;
  }

 private:
  enum class Field { kNone, kQueries, kQuery, kK, kFilter };

  // An event that belongs to the filter's value: inside it, or its first token.
  bool filter_value() {
    if (!in_filter_ && depth_ == 1 && field_ == Field::kFilter) in_filter_ = true;
    return in_filter_;
  }
  bool filter_scalar(json v) { return filter_step(filter_.scalar(std::move(v))); }
  // After each of the filter's events: its error, or, once its value is complete, the program.
  bool filter_step(bool ok) {
    if (!ok) return fail(filter_.error());
    if (!filter_.done()) return true;
    in_filter_ = false;
    field_ = Field::kNone;
    try {
      out_.has_filter = true;
      out_.filter = compile_request_filter(filter_.value(), shape_.attributes);
    } catch (const Error& e) {
      return fail(excerpt(e.what(), kMaxFilterMessage));
    }
    filter_ = FilterTree();  // its memory goes back now
    return true;
  }

  bool fail(const std::string& msg) {
    if (error_.empty()) error_ = msg;
    return false;
  }

  // A value that is not a number, or a structure where the format has none.
  bool value(const std::string& what) {
    if (depth_ == 0) return fail("expected a JSON object like {\"queries\": [[...]], \"k\": 10}, got " + what);
    if (in_row_) {
      if (what == "a list" || what == "an object")
        return fail("query " + std::to_string(rows_) + ", column " + std::to_string(col_) + ": expected a number, got " +
                    what + " (nesting is not allowed)");
      if (row_error_.empty())  // reported once the row's dimension is known to be right
        row_error_ = "query " + std::to_string(rows_) + ", column " + std::to_string(col_) + ": " + what +
                     " is not a number";
      ++col_;
      return true;
    }
    if (field_ == Field::kK) return fail("\"k\" must be an integer, got " + what);
    if (in_list_) return fail("query " + std::to_string(rows_) + " must be a list of numbers, got " + what);
    if (field_ == Field::kQueries) return fail("\"queries\" must be a list of vectors, got " + what);
    if (field_ == Field::kQuery) return fail("\"query\" must be a list of numbers, got " + what);
    return fail("unexpected " + what + " in the request object");
  }

  bool number(double v, const string_t* text, long long as_int, bool beyond_int64) {
    if (in_row_) {
      if (col_ < shape_.dim) {
        if (!(std::fabs(v) <= std::numeric_limits<float>::max())) {
          if (row_error_.empty())
            row_error_ = "query " + std::to_string(rows_) + ", column " + std::to_string(col_) + ": value " +
                         (text ? excerpt(*text, 32) : std::to_string(v)) + " is too large for float32";
        } else {
          out_.queries[static_cast<std::size_t>(rows_) * static_cast<std::size_t>(shape_.dim) +
                       static_cast<std::size_t>(col_)] = static_cast<float>(v);
        }
      }
      ++col_;
      return true;
    }
    if (depth_ == 1 && field_ == Field::kK) {
      if (text) return fail("\"k\" must be an integer, got " + excerpt(*text, 32));
      if (beyond_int64) return fail("\"k\" = " + std::to_string(static_cast<unsigned long long>(v)) + " is out of range");
      out_.has_k = true;
      out_.k = as_int;
      field_ = Field::kNone;
      return true;
    }
    return value(text ? "the number " + excerpt(*text, 32) : "a number");
  }

  const QueryShape& shape_;
  SearchBody& out_;
  std::string error_, row_error_;
  std::set<std::string> seen_;
  Field field_ = Field::kNone;
  int depth_ = 0;
  bool in_list_ = false, in_row_ = false, done_ = false;
  bool in_filter_ = false;
  FilterTree filter_;
  int rows_ = 0;
  std::int64_t col_ = 0;
};

// A filter given alone as JSON text: every event goes to a FilterTree.
class FilterSax final : public nlohmann::json_sax<json> {
 public:
  FilterTree tree;
  std::string error;

  bool null() override { return step(tree.scalar(nullptr)); }
  bool boolean(bool b) override { return step(tree.scalar(b)); }
  bool number_integer(number_integer_t v) override { return step(tree.scalar(v)); }
  bool number_unsigned(number_unsigned_t v) override { return step(tree.scalar(v)); }
  bool number_float(number_float_t v, const string_t&) override { return step(tree.scalar(v)); }
  bool string(string_t& s) override { return step(tree.scalar(std::move(s))); }
  bool binary(binary_t&) override { return step(false); }
  bool start_object(std::size_t) override { return step(tree.start(true)); }
  bool end_object() override { return step(tree.end()); }
  bool start_array(std::size_t) override { return step(tree.start(false)); }
  bool end_array() override { return step(tree.end()); }
  bool key(string_t& k) override { return step(tree.key(k)); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    if (error.empty()) error = "filter: invalid JSON: " + flat(ex.what());
    return false;
  }

 private:
  bool step(bool ok) {
    if (!ok && error.empty()) error = tree.error().empty() ? "filter: binary data" : tree.error();
    return ok;
  }
};

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

namespace {
/// A NUL byte cannot be in JSON text; the parser would stop at it and take what came before.
void refuse_nul(std::string_view text, const char* what) {
  const std::size_t nul = text.find('\0');
  if (nul != std::string_view::npos) throw Error(detail::concat(what, ": a NUL byte at offset ", nul));
}
}  // namespace

SearchBody parse_json_search(std::string_view body, const QueryShape& shape) {
  refuse_nul(body, "malformed JSON");
  SearchBody out;
  SearchSax sax(shape, out);
  const bool ok = json::sax_parse(body.begin(), body.end(), &sax, json::input_format_t::json, /*strict=*/true);
  if (!ok) throw Error(sax.error().empty() ? std::string("malformed JSON") : sax.error());
  SHARDTOPK_EXPECTS(sax.complete(), "expected a JSON object like {\"queries\": [[...]], \"k\": 10}");
  SHARDTOPK_EXPECTS(sax.saw_rows_field(), "give either \"queries\" (a list of vectors) or \"query\" (one vector)");
  out.nq = sax.rows_seen();
  return out;
}

RequestFilter parse_filter_text(std::string_view text, const AttributeSchema& attributes) {
  refuse_nul(text, "filter: invalid JSON");
  SHARDTOPK_EXPECTS(!text.empty(), "filter: invalid JSON: empty filter; leave filter= out (or give filter=null) for an "
                    "unfiltered search");
  FilterSax sax;
  const bool ok = json::sax_parse(text.begin(), text.end(), &sax, json::input_format_t::json, /*strict=*/true);
  if (!ok) throw Error(sax.error.empty() ? std::string("filter: invalid JSON") : sax.error);
  SHARDTOPK_ASSERT(sax.tree.done());
  try {
    return compile_request_filter(sax.tree.value(), &attributes);
  } catch (const Error& e) {
    throw Error(excerpt(e.what(), kMaxFilterMessage));
  }
}

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

std::string excerpt(std::string_view s, std::size_t max) {
  std::string out;
  const std::size_t n = s.size() < max ? s.size() : max;
  out.reserve(n + 32);
  static const char* hex = "0123456789abcdef";
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
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
  if (is_chunked(v)) return {0, ""};
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
