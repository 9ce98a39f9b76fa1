// JSON search bodies: simdjson reads a well-formed request straight into float32 rows; anything
// it does not take as a complete, well-formed request (malformed text, a structure or value the
// format does not have, a key twice, a bad filter) is read again by the event parser, which
// finds the first problem in document order and words it. The event parser is therefore the
// reference for what is accepted and for every message; tests/service/test_json_search.cpp
// checks that both readers agree on every body they are given.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>
#include <simdjson.h>

#include "service/request_parse.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::service {
namespace {

static_assert(kJsonPadding == simdjson::SIMDJSON_PADDING, "kJsonPadding is simdjson's padding");

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
    if (k != "queries" && k != "query" && k != "k" && k != "filter" && !is_order_field(k))
      return fail("unknown field \"" + excerpt(k, 32) + "\" (allowed: queries, query, k, filter, " +
                  std::string(kOrderFields) + ")");
    if (!seen_.insert(k).second) return fail("duplicate key \"" + k + "\" in the request object");
    if (seen_.count("queries") && seen_.count("query"))
      return fail("give either \"queries\" (a list of vectors) or \"query\" (one vector), not both");
    field_ = k == "queries" ? Field::kQueries : k == "query" ? Field::kQuery : k == "k" ? Field::kK : Field::kFilter;
    option_.clear();
    if (is_order_field(k)) option_ = k;
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
    if (!option_.empty()) {  // an order field's value, checked once the rows are known
      out_.order_fields[option_] = filter_.value();
      filter_ = FilterTree();
      option_.clear();
      return true;
    }
    try {
      out_.has_filter = true;
      out_.filter = compile_request_filter(filter_.value(), shape_.attributes);
    } catch (const Error& e) {
      return fail(excerpt_message(e.what(), kMaxFilterMessage));
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
  std::string option_;  // the order field whose value filter_ builds ("" : the filter's)
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

/// A NUL byte cannot be in JSON text; the parser would stop at it and take what came before.
void refuse_nul(std::string_view text, const char* what) {
  const std::size_t nul = text.find('\0');
  if (nul != std::string_view::npos) throw Error(detail::concat(what, ": a NUL byte at offset ", nul));
}


// ------------------------------------------------------------------------------ simdjson

// Bodies up to this size are read with the event-loop thread's own simdjson parser, whose
// working memory (about 14 bytes per body byte) stays allocated; larger ones take a parser of
// their own for the request (json_search_workspace).
constexpr std::size_t kThreadParserBytes = std::size_t{64} << 10;

// Nesting the fast reader takes: the request object, a filter's 2 · kFilterMaxDepth + 1 levels
// and a little room; deeper documents go to the event parser, which refuses them at the first
// level the format does not have.
constexpr std::size_t kFastMaxDepth = 2 * kFilterMaxDepth + 8;

// The parser kept by each event-loop thread, allocated at its first JSON body.
simdjson::dom::parser& thread_parser() {
  thread_local simdjson::dom::parser parser(kThreadParserBytes);
  thread_local bool allocated = parser.allocate(kThreadParserBytes, kFastMaxDepth) == simdjson::SUCCESS;
  (void)allocated;  // a failed allocation leaves the parser empty: every parse then fails over to the event parser
  return parser;
}

// The value nlohmann's event parser reports for a JSON number: a non-negative integer as
// unsigned, a negative one as signed, anything else as a double.
json number_as_nlohmann(simdjson::dom::element e) {
  switch (e.type()) {
    case simdjson::dom::element_type::INT64: {
      const std::int64_t v = e.get_int64().value_unsafe();
      return v >= 0 ? json(static_cast<std::uint64_t>(v)) : json(v);
    }
    case simdjson::dom::element_type::UINT64: return json(e.get_uint64().value_unsafe());
    default: return json(e.get_double().value_unsafe());
  }
}

// Feeds a filter's value to a FilterTree as the event parser would: the same events in the same
// order, so the same tree within the same limits. False at the tree's first refusal.
bool feed_filter(FilterTree& tree, simdjson::dom::element e) {
  using T = simdjson::dom::element_type;
  switch (e.type()) {
    case T::ARRAY: {
      const simdjson::dom::array a = e.get_array().value_unsafe();
      if (!tree.start(false)) return false;
      for (simdjson::dom::element x : a)
        if (!feed_filter(tree, x)) return false;
      return tree.end();
    }
    case T::OBJECT: {
      const simdjson::dom::object o = e.get_object().value_unsafe();
      if (!tree.start(true)) return false;
      for (simdjson::dom::key_value_pair kv : o)
        if (!tree.key(std::string(kv.key)) || !feed_filter(tree, kv.value)) return false;
      return tree.end();
    }
    case T::INT64:
    case T::UINT64:
    case T::DOUBLE: return tree.scalar(number_as_nlohmann(e));
    case T::STRING: return tree.scalar(std::string(e.get_string().value_unsafe()));
    case T::BOOL: return tree.scalar(e.get_bool().value_unsafe());
    case T::NULL_VALUE: return tree.scalar(nullptr);
  }
  return false;
}

// One query row: exactly `dim` numbers within float32's range, each converted as the event
// parser converts it (to double, then rounded to float once).
bool read_row(simdjson::dom::element e, std::int64_t dim, float* out) {
  simdjson::dom::array row;
  if (e.get_array().get(row) || static_cast<std::int64_t>(row.size()) != dim) return false;
  for (simdjson::dom::element x : row) {
    double v;  // a double, or an integer converted (INT64, UINT64); anything else refused
    if (x.get_double().get(v) != simdjson::SUCCESS || !(std::fabs(v) <= FLT_MAX)) return false;
    *out++ = static_cast<float>(v);
  }
  return true;
}

// The request read with `parser`; false when it is anything but a complete, well-formed
// request (the event parser then says what is wrong).
bool read_fast(simdjson::dom::parser& parser, std::string_view body, bool padded, const QueryShape& shape,
               SearchBody& out) {
  simdjson::dom::element root;
  simdjson::dom::object request;
  if (parser.parse(body.data(), body.size(), !padded).get(root) || root.get_object().get(request)) return false;
  bool seen_queries = false, seen_query = false, seen_k = false, seen_filter = false;
  for (simdjson::dom::key_value_pair field : request) {
    const std::string_view key = field.key;
    if (key == "queries" || key == "query") {
      if (seen_queries || seen_query) return false;  // a key twice, or both
      (key == "queries" ? seen_queries : seen_query) = true;
      simdjson::dom::array rows;
      std::size_t n = 1;
      if (key == "queries") {
        if (field.value.get_array().get(rows)) return false;
        n = rows.size();
        if (n == 0 || n > static_cast<std::size_t>(shape.batch_max)) return false;
      }
      out.queries.resize(n * static_cast<std::size_t>(shape.dim));
      float* dst = out.queries.data();
      if (key == "query") {
        if (!read_row(field.value, shape.dim, dst)) return false;
      } else {
        for (simdjson::dom::element row : rows) {
          if (!read_row(row, shape.dim, dst)) return false;
          dst += shape.dim;
        }
      }
      out.nq = static_cast<int>(n);
    } else if (key == "k") {
      if (seen_k || field.value.type() != simdjson::dom::element_type::INT64) return false;
      seen_k = out.has_k = true;
      out.k = field.value.get_int64().value_unsafe();
    } else if (key == "filter") {
      if (seen_filter) return false;
      seen_filter = out.has_filter = true;
      FilterTree tree;
      if (!feed_filter(tree, field.value) || !tree.done()) return false;
      try {
        out.filter = compile_request_filter(tree.value(), shape.attributes);
      } catch (const Error&) {
        return false;
      }
    } else if (is_order_field(key)) {
      FilterTree tree;
      if (out.order_fields.count(std::string(key)) || !feed_filter(tree, field.value) || !tree.done()) return false;
      out.order_fields[std::string(key)] = tree.value();
    } else {
      return false;  // an unknown field
    }
  }
  return seen_queries || seen_query;
}

// The request read by events (the reference: every refusal and its message).
SearchBody parse_json_events(std::string_view body, const QueryShape& shape) {
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

}  // namespace

std::string json_reader_kernel() { return simdjson::get_active_implementation()->name(); }

void use_json_reader_kernel(const std::string& name) {
  std::string usable;
  for (const simdjson::implementation* impl : simdjson::get_available_implementations()) {
    if (!impl->supported_by_runtime_system()) continue;
    if (impl->name() == name) {
      simdjson::get_active_implementation() = impl;
      return;
    }
    usable += (usable.empty() ? "" : ", ") + impl->name();
  }
  throw Error(detail::concat("simdjson kernel '", name, "' is not one this CPU runs (", usable, ")"));
}

std::size_t json_search_workspace(std::size_t body_bytes) {
  // simdjson's DOM parser: a tape of 8 bytes, structural indexes of 4 bytes and string room of
  // 5/3 bytes per body byte, and a padded copy of the body when its buffer has no room past it.
  return body_bytes <= kThreadParserBytes ? 0 : 16 * body_bytes;
}

bool read_json_search_fast(std::string_view body, const QueryShape& shape, SearchBody& out, std::size_t readable) {
  const bool padded = readable >= body.size() + kJsonPadding;
  out = SearchBody();
  if (body.size() <= kThreadParserBytes) return read_fast(thread_parser(), body, padded, shape, out);
  simdjson::dom::parser parser(body.size());
  return parser.allocate(body.size(), kFastMaxDepth) == simdjson::SUCCESS && read_fast(parser, body, padded, shape, out);
}

SearchBody parse_json_search(std::string_view body, const QueryShape& shape, const JsonRead& how) {
  SearchBody out;
  if (!how.fast || !read_json_search_fast(body, shape, out, how.readable)) out = parse_json_events(body, shape);
  read_order_fields(out, shape.l2);
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
    throw Error(excerpt_message(e.what(), kMaxFilterMessage));
  }
}


}  // namespace shardtopk::service
