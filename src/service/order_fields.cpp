// The order fields of a search body (request_parse.hpp): ranges, pages and counts over the total
// order, checked once against the body's rows and the metric into each query's QueryBounds.
#include <cmath>
#include <limits>
#include <string>

#include "service/request_parse.hpp"
#include "service/write_parse.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::service {
namespace {

using nlohmann::json;

double number(const json& v, const std::string& what) {
  SHARDTOPK_EXPECTS(v.is_number(), what, " must be a number, got ", excerpt(v.dump(), 32));
  const double d = v.get<double>();
  SHARDTOPK_EXPECTS(std::isfinite(d) && std::fabs(d) <= std::numeric_limits<float>::max(), what, " = ",
                    excerpt(v.dump(), 32), " is outside float32");
  return d;
}

// A value for every query: one value, or a list of nq (`pair`: a value is itself a list, so a
// single [score, id] is told from a list of pairs by its first element).
std::vector<json> per_query(const json& v, int nq, bool pair, const char* name) {
  const bool list = v.is_array() && (!pair || (!v.empty() && v[0].is_array()));
  if (!list) return std::vector<json>(static_cast<std::size_t>(nq), v);
  SHARDTOPK_EXPECTS(static_cast<int>(v.size()) == nq, "\"", name, "\" has ", v.size(), " entries for ", nq, " quer",
                    nq == 1 ? "y" : "ies", "; give one value for every query, or one list entry per query");
  return std::vector<json>(v.begin(), v.end());
}

}  // namespace

bool is_order_field(std::string_view key) {
  return key == "min_score" || key == "max_distance" || key == "limit" || key == "search_after" ||
         key == "count_only";
}

void read_order_fields(SearchBody& b, bool l2) {
  auto& f = b.order_fields;
  if (f.empty()) return;
  const char* bound_name = l2 ? "max_distance" : "min_score";
  const char* other = l2 ? "min_score" : "max_distance";
  SHARDTOPK_EXPECTS(!f.count(other), "\"", other, "\" is for ", l2 ? "inner_product and cosine" : "l2",
                    "; this index ranks by ", l2 ? "l2 distance: give max_distance" : "similarity: give min_score");
  std::vector<QueryBounds> bounds(static_cast<std::size_t>(b.nq));
  if (f.count(bound_name)) {
    const std::vector<json> v = per_query(f[bound_name], b.nq, false, bound_name);
    for (int q = 0; q < b.nq; ++q) {
      const double d = number(v[static_cast<std::size_t>(q)], std::string(bound_name) + " of query " + std::to_string(q));
      bounds[static_cast<std::size_t>(q)].has_bound = true;
      bounds[static_cast<std::size_t>(q)].bound = bound_as_float(d, l2);
    }
  }
  if (f.count("search_after")) {
    const std::vector<json> v = per_query(f["search_after"], b.nq, true, "search_after");
    for (int q = 0; q < b.nq; ++q) {
      const json& p = v[static_cast<std::size_t>(q)];
      const std::string what = "search_after of query " + std::to_string(q);
      SHARDTOPK_EXPECTS(p.is_array() && p.size() == 2, what, " must be [score, id] (a reply's \"next\"), got ",
                        excerpt(p.dump(), 32));
      SHARDTOPK_EXPECTS(p[1].is_number_integer() && (!p[1].is_number_unsigned() ||
                                                     p[1].get<std::uint64_t>() <= static_cast<std::uint64_t>(
                                                                                     std::numeric_limits<std::int64_t>::max())),
                        what, ": the id must be an int64 integer, got ", excerpt(p[1].dump(), 24));
      QueryBounds& x = bounds[static_cast<std::size_t>(q)];
      x.has_after = true;
      x.after_score = static_cast<float>(number(p[0], what + " score"));
      x.after_id = p[1].get<std::int64_t>();
    }
  }
  if (f.count("limit")) {
    const json& v = f["limit"];
    SHARDTOPK_EXPECTS(v.is_number_integer() && (!v.is_number_unsigned() || v.get<std::uint64_t>() <= 0x7fffffffu),
                      "\"limit\" must be an integer of at most 2^31 - 1, got ", excerpt(v.dump(), 24));
    SHARDTOPK_EXPECTS(!b.has_k, "give \"limit\" or \"k\", not both (they are the same number)");
    b.has_k = true;
    b.k = v.get<long long>();
  }
  if (f.count("count_only")) {
    const json& v = f["count_only"];
    SHARDTOPK_EXPECTS(v.is_boolean(), "\"count_only\" must be true or false, got ", excerpt(v.dump(), 24));
    b.count_only = v.get<bool>();
    SHARDTOPK_EXPECTS(!b.count_only || f.count(bound_name), "\"count_only\" counts the rows within a bound: give ",
                      bound_name);
    if (b.count_only && !b.has_k) {
      b.has_k = true;
      b.k = 1;
    }
  }
  b.bounds = std::move(bounds);
}

RankBody parse_json_rank(std::string_view body, const QueryShape& shape) {
  // Bounded like the write routes' bodies: a deeply nested value would otherwise recurse in the
  // parser's and dump()'s callers on the event loop's stack.
  const json j = parse_bounded_json(body);
  for (const auto& [key, v] : j.items())
    SHARDTOPK_EXPECTS(key == "query" || key == "ids" || key == "filter", "unknown field \"", excerpt(key, 32),
                      "\" (allowed: query, ids, filter)");
  SHARDTOPK_EXPECTS(j.contains("query") && j.contains("ids"), "a rank request needs \"query\" (one vector) and \"ids\"");
  RankBody out;
  const json& q = j["query"];
  SHARDTOPK_EXPECTS(q.is_array() && static_cast<std::int64_t>(q.size()) == shape.dim, "query must be a list of ",
                    shape.dim, " numbers (the index's dim), got ", q.is_array() ? std::to_string(q.size()) + " values" : excerpt(q.dump(), 24));
  out.query.reserve(q.size());
  for (std::size_t c = 0; c < q.size(); ++c)
    out.query.push_back(static_cast<float>(number(q[c], "query value " + std::to_string(c))));
  const json& ids = j["ids"];
  SHARDTOPK_EXPECTS(ids.is_array() && !ids.empty(), "ids must be a non-empty list of row ids, got ", excerpt(ids.dump(), 24));
  out.ids.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const json& v = ids[i];
    SHARDTOPK_EXPECTS(v.is_number_integer() && (!v.is_number_unsigned() || v.get<std::uint64_t>() <= static_cast<std::uint64_t>(
                                                                               std::numeric_limits<std::int64_t>::max())),
                      "ids[", i, "] must be an int64 row id, got ", excerpt(v.dump(), 24));
    out.ids.push_back(v.get<std::int64_t>());
  }
  if (j.contains("filter") && !j["filter"].is_null())
    out.filter = parse_filter_text(j["filter"].dump(), shape.attributes ? *shape.attributes : AttributeSchema{});
  return out;
}

}  // namespace shardtopk::service
