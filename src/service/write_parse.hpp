#pragma once
// Parsing and checking of write request bodies (POST /v1/upsert, /v1/delete): JSON, and the
// binary forms of an upsert and a delete.
// Pure functions over bytes and the index's shape; unit-tested in tests/service/test_write_parse.cpp.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardtopk/filter.hpp"

namespace shardtopk::service {

/// Nesting levels a write body may have (a filter inside a delete body counts its own levels).
inline constexpr int kWriteBodyMaxDepth = kFilterMaxDepth + 4;

/// A JSON object body parsed under the bounds every nlohmann-parsed route keeps: nesting at most
/// kWriteBodyMaxDepth levels (checked while parsing, so a deep body never recurses further), no
/// key twice in one object, no NUL byte. @throws Error naming what is wrong ("malformed JSON: …").
nlohmann::json parse_bounded_json(std::string_view body);

/// A parsed upsert: rows with their ids, vectors and one column per attribute given.
struct UpsertBody {
  std::int64_t rows = 0;
  std::vector<std::int64_t> ids;        ///< [rows]
  std::vector<float> vectors;           ///< [rows, dim] float32
  std::vector<AttributeColumn> columns; ///< each [rows], typed by the index's schema
};

/// Parses {"ids": [id, ...], "vectors": [[...], ...], "attributes": {"name": [v, ...], ...}}
/// ("attributes" optional). ids are int64 integers; each vector has `dim` numbers within
/// float32's range; each attribute is one of `schema`'s, with a value per row: integers for an
/// int64 attribute, numbers for a float64 one. Whether every attribute is given, ids are
/// distinct and rows fit is the index's to check (ShardedIndex::upsert).
/// @throws Error naming the field and the position: malformed JSON, nesting deeper than
///   kWriteBodyMaxDepth, unknown or repeated fields, counts that differ, wrong types or lengths.
UpsertBody parse_json_upsert(std::string_view body, std::int64_t dim, const AttributeSchema& schema);

/// Parses a binary upsert (POST /v1/upsert?n=N, application/octet-stream) of `n` rows: n int64
/// ids, then n × dim float32 vectors (row-major), then one column per attribute of `schema`, in
/// its order (/v1/info's), n int64 or n float64 each; little-endian, nothing else. The rest is
/// checked by the index, as for JSON. @throws Error naming n and the byte counts when the body's
/// length is not exactly that, or n < 1.
UpsertBody parse_binary_upsert(std::string_view body, long long n, std::int64_t dim, const AttributeSchema& schema);

/// A parsed delete: ids, or a filter whose passing rows are deleted.
struct DeleteBody {
  bool by_filter = false;
  std::vector<std::int64_t> ids;  ///< when !by_filter: at least one
  FilterProgram filter;           ///< when by_filter: compiled against `schema`
};

/// Parses {"ids": [id, ...]} or {"filter": {...}} (the filtered-search language, filter.hpp).
/// @throws Error as parse_json_upsert, and for a filter that does not compile.
DeleteBody parse_json_delete(std::string_view body, const AttributeSchema& schema);

/// Parses a binary delete (POST /v1/delete?n=N, application/octet-stream) of `n` ids: n int64,
/// little-endian, no header. @throws Error naming n and both byte counts when the body is not
/// exactly 8·n bytes, or when n < 1.
DeleteBody parse_binary_delete(std::string_view body, long long n);

}  // namespace shardtopk::service
