#pragma once
// Helpers for the filter tests: random attribute tables (clustered, scattered, low-entropy
// columns), random nested filters as JSON, and a brute-force oracle that interprets the JSON
// itself, row by row, sharing no code with the compiler or the evaluators.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardtopk/filter.hpp"

namespace shardtopk::test {

using json = nlohmann::json;

// ------------------------------------------------------------------------------ tables

/// A table with five columns of different shapes, `rows` rows, global ids `id_base + perm`:
///   tenant  int64    clustered: runs of `run` equal values, in increasing order
///   tag     int64    scattered, low entropy: 0 .. 9 (many ties)
///   year    int64    scattered: 2000 .. 2030
///   score   float64  scattered: small multiples of 0.25 in [-2, 2], with -0.0, 0.0 and ±inf
///   price   float64  clustered: increasing
/// ids: shuffled `id_base .. id_base + rows - 1` when `shuffle_ids`, else in order.
inline AttributeTable random_table(std::int64_t rows, std::uint64_t seed, std::int64_t run = 700,
                                   std::int64_t id_base = 0, bool shuffle_ids = true) {
  std::mt19937_64 rng(seed);
  AttributeColumn tenant{"tenant", AttributeType::kInt64, {}, {}};
  AttributeColumn tag{"tag", AttributeType::kInt64, {}, {}};
  AttributeColumn year{"year", AttributeType::kInt64, {}, {}};
  AttributeColumn score{"score", AttributeType::kFloat64, {}, {}};
  AttributeColumn price{"price", AttributeType::kFloat64, {}, {}};
  double p = 10.0;
  for (std::int64_t r = 0; r < rows; ++r) {
    tenant.ints.push_back(r / std::max<std::int64_t>(1, run));
    tag.ints.push_back(static_cast<std::int64_t>(rng() % 10));
    year.ints.push_back(2000 + static_cast<std::int64_t>(rng() % 31));
    const auto k = rng() % 40;
    double s = (static_cast<double>(rng() % 17) - 8.0) * 0.25;
    if (k == 0) s = -0.0;
    if (k == 1) s = std::numeric_limits<double>::infinity();
    if (k == 2) s = -std::numeric_limits<double>::infinity();
    score.reals.push_back(s);
    p += static_cast<double>(rng() % 4) * 0.5;
    price.reals.push_back(p);
  }
  std::vector<std::int64_t> ids(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) ids[static_cast<std::size_t>(r)] = id_base + r;
  if (shuffle_ids) std::shuffle(ids.begin(), ids.end(), rng);
  return AttributeTable({tenant, tag, year, score, price}, ids, 1);
}

// ------------------------------------------------------------------------------ the oracle

/// Row r's value of attribute `name` as a double (float64 columns) or int64.
struct Cell {
  bool is_int;
  std::int64_t i;
  double d;
};
inline Cell cell(const AttributeTable& t, const std::string& name, std::int64_t r) {
  for (int c = 0; c < t.columns(); ++c) {
    const AttributeColumn& col = t.column(c);
    if (col.name != name) continue;
    if (col.type == AttributeType::kInt64) return {true, col.ints[static_cast<std::size_t>(r)], 0.0};
    return {false, 0, col.reals[static_cast<std::size_t>(r)]};
  }
  throw std::runtime_error("oracle: no attribute " + name);
}

// a == b for a JSON number against a cell, by the language's rules (ints exactly, floats IEEE).
inline bool cell_equals(const Cell& c, const json& v) {
  if (c.is_int) return v.get<std::int64_t>() == c.i;
  return v.get<double>() == c.d;
}
inline bool cell_at_least(const Cell& c, const json& lo) {
  if (lo.is_null()) return true;
  return c.is_int ? c.i >= lo.get<std::int64_t>() : c.d >= lo.get<double>();
}
inline bool cell_at_most(const Cell& c, const json& hi) {
  if (hi.is_null()) return true;
  return c.is_int ? c.i <= hi.get<std::int64_t>() : c.d <= hi.get<double>();
}

/// Whether row r of `t` satisfies the (valid) filter `f`, straight from its JSON.
inline bool oracle_passes(const json& f, const AttributeTable& t, std::int64_t r) {
  const std::string& op = f.begin().key();
  const json& v = f.begin().value();
  if (op == "eq") return cell_equals(cell(t, v.begin().key(), r), v.begin().value());
  if (op == "in") {
    const Cell c = cell(t, v.begin().key(), r);
    for (const json& x : v.begin().value())
      if (cell_equals(c, x)) return true;
    return false;
  }
  if (op == "range") {
    const Cell c = cell(t, v.begin().key(), r);
    return cell_at_least(c, v.begin().value()[0]) && cell_at_most(c, v.begin().value()[1]);
  }
  if (op == "ids_in" || op == "ids_not_in") {
    const std::int64_t id = t.global_ids()[static_cast<std::size_t>(r)];
    bool found = false;
    for (const json& x : v) found = found || x.get<std::int64_t>() == id;
    return op == "ids_in" ? found : !found;
  }
  if (op == "all") {
    for (const json& g : v)
      if (!oracle_passes(g, t, r)) return false;
    return true;
  }
  if (op == "any") {
    for (const json& g : v)
      if (oracle_passes(g, t, r)) return true;
    return false;
  }
  if (op == "not") return !oracle_passes(v, t, r);
  throw std::runtime_error("oracle: unknown operator " + op);
}

// ------------------------------------------------------------------------------ random filters

/// Random valid filters over random_table's attributes, with constants drawn from the table's
/// own values (so that filters pass anything from no row to every row), plus values absent from
/// it, null range ends, empty lists, and nesting up to `max_depth`.
class FilterGenerator {
 public:
  FilterGenerator(const AttributeTable& t, std::uint64_t seed, int max_depth = 5)
      : t_(t), rng_(seed), max_depth_(max_depth) {}

  json next() { return node(1); }

 private:
  std::uint64_t pick(std::uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  std::int64_t row() { return static_cast<std::int64_t>(pick(static_cast<std::uint64_t>(std::max<std::int64_t>(1, t_.rows())))); }

  // A value of column c: usually one a row holds, sometimes a neighbour or an outsider.
  json value(int c) {
    const AttributeColumn& col = t_.column(c);
    const bool have = t_.rows() > 0 && pick(5) != 0;
    if (col.type == AttributeType::kInt64) {
      std::int64_t x = have ? col.ints[static_cast<std::size_t>(row())] : static_cast<std::int64_t>(pick(3000)) - 10;
      if (pick(6) == 0) x += 1;
      return x;
    }
    double x = have ? col.reals[static_cast<std::size_t>(row())] : static_cast<double>(pick(100)) * 0.5 - 20.0;
    if (!std::isfinite(x)) x = x > 0 ? 1e300 : -1e300;  // filters take finite numbers only
    if (pick(6) == 0) x += 0.25;
    return x;
  }
  json id() {
    if (t_.rows() > 0 && pick(4) != 0) return t_.global_ids()[static_cast<std::size_t>(row())];
    return static_cast<std::int64_t>(pick(1 << 20)) - 5;
  }

  json leaf() {
    const int c = static_cast<int>(pick(static_cast<std::uint64_t>(t_.columns())));
    const std::string& name = t_.column(c).name;
    switch (pick(5)) {
      case 0: return {{"eq", {{name, value(c)}}}};
      case 1: {
        json list = json::array();
        for (std::uint64_t i = 0, n = pick(7); i < n; ++i) list.push_back(value(c));
        return {{"in", {{name, list}}}};
      }
      case 2: {
        json lo = value(c), hi = value(c);
        if (t_.column(c).type == AttributeType::kInt64 ? lo.get<std::int64_t>() > hi.get<std::int64_t>()
                                                        : lo.get<double>() > hi.get<double>())
          std::swap(lo, hi);
        if (pick(4) == 0) lo = nullptr;
        if (pick(4) == 0) hi = nullptr;
        return {{"range", {{name, json::array({lo, hi})}}}};
      }
      default: {
        json list = json::array();
        // Ids lists sometimes take a whole run of consecutive ids (blocks a list covers exactly).
        if (pick(3) == 0 && t_.rows() > 0) {
          const std::int64_t start = t_.global_ids()[static_cast<std::size_t>(row())];
          for (std::int64_t i = 0, n = static_cast<std::int64_t>(pick(3000)); i < n; ++i) list.push_back(start + i);
        } else {
          for (std::uint64_t i = 0, n = pick(9); i < n; ++i) list.push_back(id());
        }
        return {{pick(2) ? "ids_in" : "ids_not_in", list}};
      }
    }
  }

  json node(int depth) {
    if (depth >= max_depth_ || pick(10) < 4) return leaf();
    switch (pick(3)) {
      case 0: return {{"not", node(depth + 1)}};
      default: {
        json list = json::array();
        for (std::uint64_t i = 0, n = pick(5); i < n; ++i) list.push_back(node(depth + 1));
        return {{pick(2) ? "all" : "any", list}};
      }
    }
  }

  const AttributeTable& t_;
  std::mt19937_64 rng_;
  int max_depth_;
};

}  // namespace shardtopk::test
