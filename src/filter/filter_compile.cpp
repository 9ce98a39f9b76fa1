// The filter language → a FilterProgram (postfix). Every check runs before the work it bounds:
// depth before recursion, list sizes before allocation, and a parse of JSON text stops at the
// first container nested too deep or the first value past the budget, before the document grows.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/parse.hpp"
#include "filter/filter_internal.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk {
namespace {

using json = nlohmann::json;

constexpr const char* kOperators = "eq, in, range, ids_in, ids_not_in, all, any, not";

// A JSON value as messages show it: scalars as written, containers by size (a deep container is
// never dumped: dump() recurses), long strings cut.
std::string describe(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return v.get<bool>() ? "true" : "false";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return v.dump();
    case json::value_t::number_float: {
      const double d = v.get<double>();
      if (std::isnan(d)) return "NaN";
      if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
      return v.dump();
    }
    case json::value_t::string: return "the string " + quote_for_message(v.get_ref<const std::string&>());
    case json::value_t::array: return "an array of " + std::to_string(v.size()) + " values";
    case json::value_t::object: return "an object with " + std::to_string(v.size()) + " keys";
    default: return "a value of another type";
  }
}

}  // namespace

std::string quote_for_message(const std::string& s) {
  constexpr std::size_t kMax = 64;
  std::string out = "'";
  for (std::size_t i = 0; i < s.size() && i < kMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMax) out += "...";
  return out + "'";
}

/// Builds one program; discarded whole when any check throws.
class FilterCompiler {
 public:
  explicit FilterCompiler(const AttributeSchema& schema) : schema_(schema) {}

  FilterProgram run(const json& filter) {
    p_.ops_.clear();
    node(filter, 1, "");
    p_.max_stack_ = filter_detail::check_program(p_.ops_, p_.ints_, p_.reals_, schema_, "filter: internal: ");
    return std::move(p_);
  }

 private:
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw Error("filter: " + what + (where.empty() ? "" : " (at " + where + ")"));
  }

  static std::string child(const std::string& where, const std::string& step) {
    return where.empty() ? step : (step[0] == '[' ? where + step : where + "." + step);
  }

  void emit(FilterOpCode code, std::int32_t column = 0, std::int32_t first = 0, std::int32_t count = 0) {
    FilterOp op;
    op.code = code;
    op.column = column;
    op.first = first;
    op.count = count;
    p_.ops_.push_back(op);
  }

  void node(const json& j, int depth, const std::string& where) {
    if (++nodes_ > kFilterMaxNodes)
      fail(where, "more than " + std::to_string(kFilterMaxNodes) + " operators in one filter");
    if (!j.is_object())
      fail(where, "expected a filter object with one operator, such as {\"eq\": {\"tenant\": 7}}, got " + describe(j));
    if (j.size() != 1) {
      std::string keys;
      int shown = 0;
      for (auto it = j.begin(); it != j.end() && shown < 4; ++it, ++shown)
        keys += (shown ? ", " : "") + quote_for_message(it.key());
      fail(where, "a filter object has exactly one key (its operator), got " + std::to_string(j.size()) +
                      (j.empty() ? "" : " (" + keys + (j.size() > 4 ? ", ..." : "") + ")"));
    }
    const std::string& op = j.begin().key();
    const json& v = j.begin().value();
    if (op == "eq") {
      eq(v, where);
    } else if (op == "in") {
      in(v, where);
    } else if (op == "range") {
      range(v, where);
    } else if (op == "ids_in" || op == "ids_not_in") {
      ids(op, v, where);
    } else if (op == "all" || op == "any") {
      list(op, v, depth, where);
    } else if (op == "not") {
      if (depth + 1 > kFilterMaxDepth)
        fail(where, "nested deeper than " + std::to_string(kFilterMaxDepth) + " levels");
      node(v, depth + 1, child(where, "not"));
      emit(FilterOpCode::kNot);
    } else {
      fail(where, "unknown operator " + quote_for_message(op) + " (known: " + kOperators + ")");
    }
  }

  // {"attr": value} of eq / in / range: the attribute's column index.
  int attribute(const std::string& op, const json& v, const std::string& where, const char* shape) {
    if (!v.is_object())
      fail(where, "'" + op + "' expects an object " + shape + ", got " + describe(v));
    if (v.size() != 1)
      fail(where, "'" + op + "' expects one attribute, got " + std::to_string(v.size()));
    const std::string& name = v.begin().key();
    for (std::size_t c = 0; c < schema_.size(); ++c)
      if (schema_[c].name == name) return static_cast<int>(c);
    std::string known;
    for (std::size_t c = 0; c < schema_.size(); ++c) known += (c ? ", " : "") + schema_[c].name;
    fail(where, "unknown attribute " + quote_for_message(name) + " (known: " +
                    (known.empty() ? "none; the corpus has no corpus.attributes" : known) + ")");
  }

  // What a value is, for messages: "'eq' value" + " for int64 attribute 'tenant'" (head, tail).
  struct What {
    std::string head, tail;
    std::string with(const json& v) const { return head + " " + describe(v) + tail; }
    std::string without() const { return head + tail; }
  };

  std::int64_t int_value(const json& v, const What& what, const std::string& where) const {
    if (v.is_number_unsigned()) {
      const std::uint64_t u = v.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        fail(where, what.with(v) + " is outside int64");
      return static_cast<std::int64_t>(u);
    }
    if (v.is_number_integer()) return v.get<std::int64_t>();
    if (v.is_number_float()) {
      // An integer literal outside int64 and uint64 reads as a real, rounded (-2^63 - 1 to -2^63):
      // a whole real of that magnitude is named as out of range, not as a fraction.
      const double d = v.get<double>();
      if (std::isfinite(d) && std::nearbyint(d) == d && !(d > -0x1p63 && d < 0x1p63))
        fail(where, what.with(v) + " is outside int64");
      fail(where, what.with(v) + " is not an integer (int64 values compare exactly with integers)");
    }
    fail(where, what.without() + " must be an integer, got " + describe(v));
  }

  double real_value(const json& v, const What& what, const std::string& where) const {
    double d = 0;
    if (v.is_number_float()) {
      d = v.get<double>();
      if (!std::isfinite(d)) fail(where, what.with(v) + " is not a finite number (NaN and infinities are refused)");
    } else if (v.is_number_unsigned()) {
      const std::uint64_t u = v.get<std::uint64_t>();
      d = static_cast<double>(u);
      if (!exactly_float64(u)) fail(where, what.with(v) + " is not exactly representable as a float64");
    } else if (v.is_number_integer()) {
      const std::int64_t i = v.get<std::int64_t>();
      d = static_cast<double>(i);
      if (!exactly_float64(i)) fail(where, what.with(v) + " is not exactly representable as a float64");
    } else {
      fail(where, what.without() + " must be a number, got " + describe(v));
    }
    return d == 0.0 ? 0.0 : d;  // -0.0 and 0.0 compare equal; one spelling keeps programs canonical
  }

  static What value_of(const std::string& op, const AttributeSpec& a, const char* noun = "value") {
    return {"'" + op + "' " + noun, " for " + to_string(a.type) + " attribute '" + a.name + "'"};
  }

  void eq(const json& v, const std::string& where) {
    const int c = attribute("eq", v, where, "{attribute: value}");
    const AttributeSpec& a = schema_[static_cast<std::size_t>(c)];
    const json& x = v.begin().value();
    if (a.type == AttributeType::kInt64) {
      const std::int64_t i = int_value(x, value_of("eq", a), where);
      emit(FilterOpCode::kRangeInt, c, push_ints({i, i}), 2);
    } else {
      const double d = real_value(x, value_of("eq", a), where);
      emit(FilterOpCode::kRangeReal, c, push_reals({d, d}), 2);
    }
  }

  void range(const json& v, const std::string& where) {
    const int c = attribute("range", v, where, "{attribute: [lo, hi]}");
    const AttributeSpec& a = schema_[static_cast<std::size_t>(c)];
    const json& b = v.begin().value();
    if (!b.is_array() || b.size() != 2)
      fail(where, "'range' for '" + a.name + "' expects [lo, hi] (inclusive; null for an open end), got " + describe(b));
    const What what = value_of("range", a, "bound");
    if (a.type == AttributeType::kInt64) {
      const std::int64_t lo = b[0].is_null() ? std::numeric_limits<std::int64_t>::min() : int_value(b[0], what, where);
      const std::int64_t hi = b[1].is_null() ? std::numeric_limits<std::int64_t>::max() : int_value(b[1], what, where);
      if (lo > hi)
        fail(where, "'range' for '" + a.name + "' is empty: lower bound " + std::to_string(lo) +
                        " is above upper bound " + std::to_string(hi));
      emit(FilterOpCode::kRangeInt, c, push_ints({lo, hi}), 2);
    } else {
      const double inf = std::numeric_limits<double>::infinity();
      const double lo = b[0].is_null() ? -inf : real_value(b[0], what, where);
      const double hi = b[1].is_null() ? inf : real_value(b[1], what, where);
      if (lo > hi)
        fail(where, "'range' for '" + a.name + "' is empty: lower bound " + describe(b[0]) + " is above upper bound " +
                        describe(b[1]));
      emit(FilterOpCode::kRangeReal, c, push_reals({lo, hi}), 2);
    }
  }

  // Checks a list's size against the values budget before anything is allocated for it.
  void take_values(const json& list, const std::string& op, const std::string& where) {
    const auto n = static_cast<std::int64_t>(list.size());
    if (n > kFilterMaxValues - values_)
      fail(where, "more than " + std::to_string(kFilterMaxValues) + " values in the lists of one filter ('" + op +
                      "' has " + std::to_string(n) + (values_ > 0 ? ", after " + std::to_string(values_) + " before it" : "") +
                      ")");
    values_ += n;
  }

  void in(const json& v, const std::string& where) {
    const int c = attribute("in", v, where, "{attribute: [values]}");
    const AttributeSpec& a = schema_[static_cast<std::size_t>(c)];
    const json& list = v.begin().value();
    if (!list.is_array()) fail(where, "'in' for '" + a.name + "' expects a list of values, got " + describe(list));
    take_values(list, "in", where);
    const What what = value_of("in", a);
    if (a.type == AttributeType::kInt64) {
      const auto first = p_.ints_.size();
      p_.ints_.reserve(first + list.size());
      for (const json& x : list) p_.ints_.push_back(int_value(x, what, where));
      emit(FilterOpCode::kInInt, c, static_cast<std::int32_t>(first), sort_unique(p_.ints_, first));
    } else {
      const auto first = p_.reals_.size();
      p_.reals_.reserve(first + list.size());
      for (const json& x : list) p_.reals_.push_back(real_value(x, what, where));
      emit(FilterOpCode::kInReal, c, static_cast<std::int32_t>(first), sort_unique(p_.reals_, first));
    }
  }

  void ids(const std::string& op, const json& v, const std::string& where) {
    if (!v.is_array()) fail(where, "'" + op + "' expects a list of global ids, got " + describe(v));
    take_values(v, op, where);
    const auto first = p_.ints_.size();
    p_.ints_.reserve(first + v.size());
    const What what{"'" + op + "' id", ""};
    for (const json& x : v) p_.ints_.push_back(int_value(x, what, where));
    emit(FilterOpCode::kInInt, kFilterIdColumn, static_cast<std::int32_t>(first), sort_unique(p_.ints_, first));
    if (op == "ids_not_in") emit(FilterOpCode::kNot);
  }

  // all [a, b, c] → a b AND c AND (the stack never holds more than depth + 1 values); [] → TRUE
  // for all, FALSE for any; [a] → a.
  void list(const std::string& op, const json& v, int depth, const std::string& where) {
    if (!v.is_array()) fail(where, "'" + op + "' expects a list of filters, got " + describe(v));
    if (v.size() > static_cast<std::size_t>(kFilterMaxNodes))
      fail(where, "more than " + std::to_string(kFilterMaxNodes) + " operators in one filter ('" + op + "' lists " +
                      std::to_string(v.size()) + ")");
    const bool is_all = op == "all";
    if (v.empty()) {
      emit(is_all ? FilterOpCode::kTrue : FilterOpCode::kFalse);
      return;
    }
    if (depth + 1 > kFilterMaxDepth) fail(where, "nested deeper than " + std::to_string(kFilterMaxDepth) + " levels");
    for (std::size_t i = 0; i < v.size(); ++i) {
      node(v[i], depth + 1, child(where, op + "[" + std::to_string(i) + "]"));
      if (i > 0) emit(is_all ? FilterOpCode::kAnd : FilterOpCode::kOr);
    }
  }

  std::int32_t push_ints(std::initializer_list<std::int64_t> v) {
    const auto first = static_cast<std::int32_t>(p_.ints_.size());
    p_.ints_.insert(p_.ints_.end(), v);
    return first;
  }
  std::int32_t push_reals(std::initializer_list<double> v) {
    const auto first = static_cast<std::int32_t>(p_.reals_.size());
    p_.reals_.insert(p_.reals_.end(), v);
    return first;
  }
  template <class T>
  static std::int32_t sort_unique(std::vector<T>& pool, std::size_t first) {
    std::sort(pool.begin() + static_cast<std::ptrdiff_t>(first), pool.end());
    pool.erase(std::unique(pool.begin() + static_cast<std::ptrdiff_t>(first), pool.end()), pool.end());
    return static_cast<std::int32_t>(pool.size() - first);
  }

  const AttributeSchema& schema_;
  FilterProgram p_;
  int nodes_ = 0;
  std::int64_t values_ = 0;
};

FilterProgram compile_filter(const json& filter, const AttributeSchema& schema) {
  return FilterCompiler(schema).run(filter);
}

FilterProgram parse_filter(const std::string& json_text, const AttributeSchema& schema) {
  // A filter of depth d nests at most 2d + 1 JSON containers ({"all": [ ... ]} adds two, a
  // leaf {"in": {"a": [..]}} three), and a valid one has at most 10 structural events per
  // operator besides the values of its lists.
  constexpr int kMaxJsonDepth = 2 * kFilterMaxDepth + 1;
  constexpr std::int64_t kMaxEvents = kFilterMaxValues + 16 * kFilterMaxNodes;
  std::int64_t events = 0;
  // The keys of each open object: a key given twice is refused (a parsed object keeps only the
  // last one, so {"eq": {"a": 1, "a": 2}} would silently filter on a = 2), as the service does.
  std::vector<std::set<std::string>> keys;
  const json::parser_callback_t bound = [&events, &keys](int depth, json::parse_event_t ev, json& parsed) {
    if (++events > kMaxEvents)
      throw Error("filter: more than " + std::to_string(kFilterMaxValues) + " values in the lists of one filter");
    if ((ev == json::parse_event_t::object_start || ev == json::parse_event_t::array_start) && depth >= kMaxJsonDepth)
      throw Error("filter: nested deeper than " + std::to_string(kFilterMaxDepth) + " levels");
    if (ev == json::parse_event_t::object_start) keys.emplace_back();
    if (ev == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (ev == json::parse_event_t::key && !keys.empty()) {
      const std::string k = parsed.get<std::string>();
      if (!keys.back().insert(k).second)
        throw Error("filter: key " + (k.size() > 64 ? k.substr(0, 64) + "..." : k) + " given twice in one object");
    }
    return true;
  };
  const std::size_t nul = json_text.find('\0');
  SHARDTOPK_EXPECTS(nul == std::string::npos, "filter: invalid JSON: a NUL byte at offset ", nul);
  json j;
  try {
    j = json::parse(json_text, bound);
  } catch (const json::exception& e) {
    throw Error(std::string("filter: invalid JSON: ") + e.what());
  }
  return compile_filter(j, schema);
}

}  // namespace shardtopk
