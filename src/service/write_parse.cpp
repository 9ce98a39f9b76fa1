// Write request bodies: a document parse with its nesting bounded while parsing (hostile input
// cannot exhaust the stack), then checks field by field.
#include "service/write_parse.hpp"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/parse.hpp"
#include "service/request_parse.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::service {
namespace {

using nlohmann::json;

/// Why a JSON value is not an int64 ("" when it is): an integer literal outside int64 and
/// uint64 reads as a real, rounded (-2^63 - 1 to -2^63), so a whole real of that magnitude is
/// "outside the int64 range", not "not an integer".
std::string not_int64(const json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>() > INT64_MAX ? "is outside the int64 range" : "";
  if (v.is_number_integer()) return "";
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && std::nearbyint(d) == d && !(d > -0x1p63 && d < 0x1p63)) return "is outside the int64 range";
    return "is not an integer";
  }
  return "is not a number";
}

std::int64_t as_id(const json& v, const char* where, std::size_t i) {
  const std::string why = not_int64(v);
  SHARDTOPK_EXPECTS(why.empty(), where, "[", i, "] = ", excerpt(v.dump(), 24), " ", why, " (ids are int64)");
  return v.get<std::int64_t>();
}

std::vector<std::int64_t> id_list(const json& v, const char* where) {
  SHARDTOPK_EXPECTS(v.is_array(), "\"", where, "\" must be a list of integers");
  std::vector<std::int64_t> ids;
  ids.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) ids.push_back(as_id(v[i], where, i));
  return ids;
}

}  // namespace

nlohmann::json parse_bounded_json(std::string_view body) {
  SHARDTOPK_EXPECTS(!body.empty(), "empty body: expected a JSON object");
  // A NUL byte cannot be in JSON text; the parser would stop at it and take what came before.
  const std::size_t nul = body.find('\0');
  SHARDTOPK_EXPECTS(nul == std::string_view::npos, "malformed JSON: a NUL byte at offset ", nul);
  // Nesting is bounded while parsing; a key repeated in one object is refused (the parser keeps
  // the last one, which would change a different row than the one the client meant).
  std::vector<std::set<std::string>> keys;  // the keys seen in each open object
  const json::parser_callback_t limit = [&keys](int depth, json::parse_event_t ev, json& v) {
    if (depth > kWriteBodyMaxDepth)
      throw Error("the body nests deeper than " + std::to_string(kWriteBodyMaxDepth) + " levels");
    if (ev == json::parse_event_t::object_start) keys.emplace_back();
    else if (ev == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    else if (ev == json::parse_event_t::key && !keys.empty() && !keys.back().insert(v.get<std::string>()).second)
      throw Error("duplicate key \"" + excerpt(v.get<std::string>(), 32) + "\" in one object");
    return true;
  };
  try {
    json j = json::parse(body.begin(), body.end(), limit);
    SHARDTOPK_EXPECTS(j.is_object(), "expected a JSON object");
    return j;
  } catch (const json::exception& e) {
    throw Error(std::string("malformed JSON: ") + e.what());
  }
}


UpsertBody parse_json_upsert(std::string_view body, std::int64_t dim, const AttributeSchema& schema) {
  const json j = parse_bounded_json(body);
  for (const auto& [key, value] : j.items())
    SHARDTOPK_EXPECTS(key == "ids" || key == "vectors" || key == "attributes", "unknown field \"", excerpt(key, 32),
                      "\" (allowed: ids, vectors, attributes)");
  SHARDTOPK_EXPECTS(j.contains("ids") && j.contains("vectors"), "an upsert needs \"ids\" and \"vectors\"");
  UpsertBody out;
  out.ids = id_list(j["ids"], "ids");
  out.rows = static_cast<std::int64_t>(out.ids.size());
  SHARDTOPK_EXPECTS(out.rows >= 1, "\"ids\" is empty: an upsert needs at least one row");
  const json& vecs = j["vectors"];
  SHARDTOPK_EXPECTS(vecs.is_array() && static_cast<std::int64_t>(vecs.size()) == out.rows, "\"vectors\" must be a list of ",
                    out.rows, " vectors (one per id), it has ", vecs.is_array() ? vecs.size() : 0);
  out.vectors.reserve(static_cast<std::size_t>(out.rows * dim));
  for (std::size_t r = 0; r < vecs.size(); ++r) {
    const json& row = vecs[r];
    SHARDTOPK_EXPECTS(row.is_array() && static_cast<std::int64_t>(row.size()) == dim, "vectors[", r, "] must hold ",
                      dim, " numbers (the index's dimension), it holds ", row.is_array() ? row.size() : 0);
    for (std::size_t c = 0; c < row.size(); ++c) {
      SHARDTOPK_EXPECTS(row[c].is_number(), "vectors[", r, "][", c, "] is not a number");
      const double v = row[c].get<double>();
      SHARDTOPK_EXPECTS(std::fabs(v) <= FLT_MAX, "vectors[", r, "][", c, "] = ", v, " is too large for float32");
      out.vectors.push_back(static_cast<float>(v));
    }
  }
  if (j.contains("attributes")) {
    const json& attrs = j["attributes"];
    SHARDTOPK_EXPECTS(attrs.is_object(), "\"attributes\" must be an object of name: [values]");
    for (const auto& [name, values] : attrs.items()) {
      const AttributeSpec* spec = nullptr;
      for (const auto& s : schema)
        if (s.name == name) spec = &s;
      if (!spec) {
        std::string names;
        for (const auto& s : schema) names += (names.empty() ? "" : ", ") + s.name;
        throw Error("unknown attribute \"" + excerpt(name, 32) + "\" (the corpus's attributes: " +
                    (names.empty() ? "none" : names) + ")");
      }
      SHARDTOPK_EXPECTS(values.is_array() && static_cast<std::int64_t>(values.size()) == out.rows, "attribute \"", name,
                        "\" must be a list of ", out.rows, " values (one per id)");
      AttributeColumn col;
      col.name = name;
      col.type = spec->type;
      for (std::size_t i = 0; i < values.size(); ++i) {
        const json& v = values[i];
        if (spec->type == AttributeType::kInt64) {
          const std::string why = not_int64(v);
          SHARDTOPK_EXPECTS(why.empty(), "attribute \"", name, "\"[", i, "] = ", excerpt(v.dump(), 24), " ", why,
                            " (the attribute is int64)");
          col.ints.push_back(v.get<std::int64_t>());
        } else {
          SHARDTOPK_EXPECTS(v.is_number(), "attribute \"", name, "\"[", i, "] is not a number");
          // As the filter language reads the same literal: an integer the attribute cannot hold
          // exactly would be stored as another value, which an equality filter never finds.
          const bool exact = v.is_number_unsigned() ? exactly_float64(v.get<std::uint64_t>())
                             : v.is_number_integer() ? exactly_float64(v.get<std::int64_t>())
                                                     : true;
          SHARDTOPK_EXPECTS(exact, "attribute \"", name, "\"[", i, "] = ", excerpt(v.dump(), 24),
                            " is not exactly representable as a float64 (the attribute is float64)");
          col.reals.push_back(v.get<double>());
        }
      }
      out.columns.push_back(std::move(col));
    }
  }
  return out;
}

UpsertBody parse_binary_upsert(std::string_view body, long long n, std::int64_t dim, const AttributeSchema& schema) {
  SHARDTOPK_EXPECTS(n >= 1, "n=", n, ": a binary upsert needs at least one row");
  const std::size_t cols = schema.size();
  // Bytes per row: id, vector, one value per attribute; n is bounded by the body first, so the
  // products below cannot overflow.
  const std::size_t row_bytes = 8 + 4 * static_cast<std::size_t>(dim) + 8 * cols;
  SHARDTOPK_EXPECTS(static_cast<unsigned long long>(n) <= body.size() / row_bytes &&
                        body.size() == static_cast<std::size_t>(n) * row_bytes,
                    "binary upsert body of ", body.size(), " bytes, but n=", n, " rows take ",
                    static_cast<unsigned long long>(n) <= body.size() ? std::to_string(n * row_bytes) : std::string("more"),
                    " bytes: n x 8 (int64 ids) + n x ", dim, " x 4 (float32 vectors) + n x 8 for each of ", cols,
                    " attribute column(s) (/v1/info order)");
  const std::size_t rows = static_cast<std::size_t>(n);
  UpsertBody out;
  out.rows = n;
  out.ids.resize(rows);
  out.vectors.resize(rows * static_cast<std::size_t>(dim));
  const char* p = body.data();
  std::memcpy(out.ids.data(), p, 8 * rows);
  p += 8 * rows;
  std::memcpy(out.vectors.data(), p, 4 * out.vectors.size());
  p += 4 * out.vectors.size();
  for (const AttributeSpec& a : schema) {
    AttributeColumn c{a.name, a.type, {}, {}};
    if (a.type == AttributeType::kInt64) {
      c.ints.resize(rows);
      std::memcpy(c.ints.data(), p, 8 * rows);
    } else {
      c.reals.resize(rows);
      std::memcpy(c.reals.data(), p, 8 * rows);
    }
    p += 8 * rows;
    out.columns.push_back(std::move(c));
  }
  return out;
}

DeleteBody parse_binary_delete(std::string_view body, long long n) {
  SHARDTOPK_EXPECTS(n >= 1, "n=", n, ": a binary delete needs at least one id");
  SHARDTOPK_EXPECTS(static_cast<unsigned long long>(n) <= body.size() / 8 && body.size() == static_cast<std::size_t>(n) * 8,
                    "binary delete body of ", body.size(), " bytes, but n=", n, " ids take ",
                    static_cast<unsigned long long>(n) <= body.size() ? std::to_string(8 * n) : std::string("more"),
                    " bytes: n x 8 (int64 ids, little-endian)");
  DeleteBody out;
  out.ids.resize(static_cast<std::size_t>(n));
  std::memcpy(out.ids.data(), body.data(), body.size());
  return out;
}

DeleteBody parse_json_delete(std::string_view body, const AttributeSchema& schema) {
  const json j = parse_bounded_json(body);
  for (const auto& [key, value] : j.items())
    SHARDTOPK_EXPECTS(key == "ids" || key == "filter", "unknown field \"", excerpt(key, 32), "\" (allowed: ids, filter)");
  SHARDTOPK_EXPECTS(j.contains("ids") != j.contains("filter"), "a delete takes either \"ids\" or \"filter\", not ",
                    j.contains("ids") ? "both" : "neither");
  DeleteBody out;
  if (j.contains("ids")) {
    out.ids = id_list(j["ids"], "ids");
    SHARDTOPK_EXPECTS(!out.ids.empty(), "\"ids\" is empty: a delete needs at least one id");
  } else {
    out.by_filter = true;
    out.filter = compile_filter(j["filter"], schema);
  }
  return out;
}

}  // namespace shardtopk::service
