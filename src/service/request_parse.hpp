#pragma once
// Parsing and checking of search request bodies (JSON: json_search.cpp; binary: request_parse.cpp)
// and of the few header values the front end reads. Pure functions over bytes: no HTTP library, no
// index; unit-tested in tests/service/test_request_parse.cpp and test_json_search.cpp.
//
// Every error is an Error whose message names the problem and quotes at most a short, flat
// excerpt of the input (excerpt()): never a re-serialisation of a client's value, whose size
// and nesting the client chooses.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <map>

#include <nlohmann/json.hpp>

#include "shardtopk/filter.hpp"
#include "shardtopk/search_batch.hpp"

namespace shardtopk::service {

/// What a request body may hold, from the index's shape.
struct QueryShape {
  std::int64_t dim = 0;  ///< values per query row
  int batch_max = 0;     ///< rows per request
  /// The index's attributes, which filters are compiled against (nullptr: none; filters may
  /// then use ids_in / ids_not_in only).
  const AttributeSchema* attributes = nullptr;
  bool l2 = false;  ///< the metric is l2: ranges take max_distance (others: min_score)
};

/// A compiled request filter; nullptr when the request has none, or when its filter passes
/// every row (such as {"all": []}), so that only filters that do filter count against
/// search.max_filters.
using RequestFilter = std::shared_ptr<const FilterProgram>;

/// A parsed search request body.
struct SearchBody {
  int nq = 0;                  ///< query rows
  bool has_k = false;          ///< the body gave k (JSON "k")
  long long k = 0;
  std::vector<float> queries;  ///< [nq, dim] float32, row-major
  bool has_filter = false;     ///< the body has a "filter" key (null included)
  RequestFilter filter;        ///< compiled once here; applies to every query of the request
  /// Queries over the total order (docs/SERVING.md "Ranges, pages and ranks"), as read:
  /// the values of min_score, max_distance, limit, search_after, count_only by name ...
  std::map<std::string, nlohmann::json> order_fields;
  /// ... and as checked (read_order_fields): [nq] each query's bounds, or empty (none).
  std::vector<QueryBounds> bounds;
  bool count_only = false;  ///< only the totals are answered
};

/// The order fields a search body may hold, for messages.
inline constexpr const char* kOrderFields = "min_score, max_distance, limit, search_after, count_only";
/// Whether `key` is one of them.
bool is_order_field(std::string_view key);

/// Checks body.order_fields against its rows and the metric, into body.bounds and count_only;
/// "limit" becomes k. min_score (inner_product, cosine) / max_distance (l2): a number for every
/// query or a list of nq numbers, rounded to the float32 that keeps exactly the same rows
/// (min_score upward, max_distance downward). search_after: [score, id] (one query) or a list of
/// nq such pairs, a previous reply's "next" as written. count_only: a boolean, with a bound.
/// @throws Error naming the field and value: a non-number, a number outside float32, an id that
///   is not an int64, the bound of the other metric, a list of the wrong length, limit with k,
///   count_only without a bound.
void read_order_fields(SearchBody& body, bool l2);

/// A parsed /v1/rank body.
struct RankBody {
  std::vector<float> query;        ///< [dim] float32
  std::vector<std::int64_t> ids;   ///< [n] as given (repeats allowed), n >= 1
  RequestFilter filter;            ///< nullptr: none, or one passing every row
};

/// Parses {"query": [dim numbers], "ids": [int64, ...], "filter": F} (filter optional, null: none;
/// docs/SERVING.md "Ranges, pages and counts"). The index checks the ids' count and that each
/// id has a live row (ShardedIndex::rank).
/// @throws Error naming the field: malformed JSON, a field other than these, a query of the wrong
///   dimension or with a value that is not a number or is outside float32, ids empty or not a
///   list of int64 integers (naming the entry), a bad filter ("filter: ...").
RankBody parse_json_rank(std::string_view body, const QueryShape& shape);

/// Room past the end of a body's bytes with which parse_json_search reads it in place.
inline constexpr std::size_t kJsonPadding = 64;

/// How parse_json_search may read a body.
struct JsonRead {
  /// Bytes readable from the body's first byte (its buffer's capacity, at least its size):
  /// simdjson reads up to kJsonPadding bytes past the end, so a body with that room is read in
  /// place, others are copied first.
  std::size_t readable = 0;
  /// false: the event parser alone (no working memory beyond the body's own).
  bool fast = true;
};

/// Parses {"queries": [[...], ...], "k": K, "filter": F} or {"query": [...], "k": K, "filter": F}
/// (k and filter optional; "filter": null is no filter) straight into float32 rows (each number
/// read as a double, then rounded to float once). simdjson reads a well-formed request; any other
/// body is read by an event (SAX) parser that finds the first problem in document order: no
/// document tree for the rows, nesting refused at the first level the format does not have,
/// duplicate keys and unknown fields refused. The filter (docs/FILTERS.md) is built from the
/// same events within the language's limits (nesting, values: checked as they arrive, before
/// the filter's tree grows past them; a key repeated inside it is refused) and compiled against
/// shape.attributes.
/// @throws Error: malformed JSON (or a NUL byte), wrong structure, duplicate or unknown key,
///   wrong dimension, more than batch_max rows, no rows, a value that is not a number or is too
///   large for float32, a k that is not an integer in the int64 range; a bad filter
///   ("filter: ...", naming the operator, attribute or value).
SearchBody parse_json_search(std::string_view body, const QueryShape& shape, const JsonRead& how = {});

/// parse_json_search's simdjson reader alone (tests, benchmarks): true and `out` filled when
/// `body` is a complete, well-formed request; false for any other body, whose problem only the
/// event parser words. `readable` as JsonRead's. A body it takes is taken by the event parser
/// with the same result.
bool read_json_search_fast(std::string_view body, const QueryShape& shape, SearchBody& out, std::size_t readable = 0);

/// The name of the instruction-set kernel simdjson chose for this CPU at run time ("icelake",
/// "haswell", "westmere", "fallback", ...): its reading speed depends on it (benchmarks report it).
std::string json_reader_kernel();

/// Benchmarks and tests: makes simdjson use kernel `name` from now on, in every thread (the
/// same answers with each; only the speed differs). Throws Error naming `name` and the kernels
/// this CPU runs when it is not one of them.
void use_json_reader_kernel(const std::string& name);

/// Working memory (bytes) that parse_json_search's simdjson reader takes for a body of
/// `body_bytes` for the length of the call, beyond what each event-loop thread keeps for bodies
/// up to 64 KiB (0 for those): about 16 bytes per body byte.
std::size_t json_search_workspace(std::size_t body_bytes);

/// Parses and compiles a filter given as JSON text (the binary route's ?filter=, already
/// URL-decoded) with the same bounds and messages as the JSON body's "filter".
/// @returns the program, or nullptr for `null` and for a filter that passes every row.
/// @throws Error ("filter: ...") for invalid JSON, a repeated key, a limit passed, a bad filter.
RequestFilter parse_filter_text(std::string_view text, const AttributeSchema& attributes);

/// Room the derived JSON body limit keeps for a request's filter, beyond the largest query rows
/// (a filter with larger lists needs service.max_body_bytes).
inline constexpr std::size_t kFilterBodyBytes = std::size_t{1} << 20;

/// Bytes of the optional binary request header (docs/SERVING.md, "Binary protocol").
inline constexpr std::size_t kBinaryHeaderBytes = 32;
/// Its first four bytes. As a little-endian float32 they are a NaN, which no query may hold, so
/// a body that starts with them is never a headerless query row.
inline constexpr unsigned char kBinaryMagic[4] = {'S', 'T', 0xC0, 0x7F};
/// dtype codes of the header.
enum class BinaryDtype : std::uint32_t { kFloat32 = 1, kFloat64 = 2, kFloat16 = 3, kBFloat16 = 4 };

/// Parses a binary body: [optional 32-byte header] + rows of dim little-endian float32 values.
/// With the header, its byte order, dtype, rows and dim must describe the rest of the body.
/// @throws Error: empty body, length not a multiple of 4 x dim, more than batch_max rows, a
///   header that disagrees with the body or the index.
SearchBody parse_binary_search(std::string_view body, const QueryShape& shape);

/// Writes the optional header for `rows` float32 rows of `dim` values (clients, tests).
std::string binary_header(std::uint32_t rows, std::uint32_t dim);

/// Media type of a Content-Type value: type/subtype compared case-insensitively, parameters
/// (e.g. charset) and surrounding blanks ignored; "" for an absent header.
enum class Media { kNone, kJson, kBinary, kOther };
Media parse_media_type(std::string_view content_type);

/// Body limits derived from the index's shape (used when service.max_body_bytes is 0): the
/// largest legal request of each kind, binary exactly (header + batch_max x dim x 4), JSON with
/// 32 characters per value (a float64's shortest text, its sign and separator fit) plus framing
/// and kFilterBodyBytes for a filter.
struct BodyLimits {
  std::size_t json = 0;
  std::size_t binary = 0;
};
BodyLimits derived_body_limits(std::int64_t dim, int batch_max);

/// Why a request's body length is ambiguous, and the status to answer ({0, ""}: it is not),
/// from the number of Content-Length and Transfer-Encoding fields and the (first)
/// Transfer-Encoding value. Where two readers of the same bytes could frame the body
/// differently (a proxy by Content-Length, this server as chunked), the bytes after the body
/// may be a request the proxy never saw, so RFC 9112 §6.3 has the request refused and its
/// connection closed: both fields (400), either repeated (400), a coding list whose final coding
/// is not chunked (400; the length is unknown), other codings before chunked (501), `chunked`
/// with white space the HTTP library kept around it (400: libmicrohttpd compares the value as
/// it holds it, so it would wait for the connection's end instead of reading chunks). Accepted:
/// exactly `chunked`, in any case, as `te` holds it (libmicrohttpd drops the spaces before it).
std::pair<int, std::string> framing_problem(int content_lengths, int transfer_encodings, std::string_view te);

/// A short, flat, printable excerpt of client bytes for messages: at most `max` characters,
/// non-printable bytes as \xNN, a note of the full length when cut.
std::string excerpt(std::string_view s, std::size_t max = 40);

/// excerpt() for a message of this service's own whose client bytes are flattened already (a
/// filter's messages quote names as 'tenant\x00x'): its backslashes are kept, so those bytes are
/// not escaped twice; anything else non-printable is still \xNN.
std::string excerpt_message(std::string_view s, std::size_t max);

/// Parses a decimal integer query parameter: decimal digits, optionally after a '-' (no '+', no
/// white space). @throws Error naming the parameter and an excerpt of the value.
long long parse_int_param(std::string_view name, std::string_view value);

}  // namespace shardtopk::service
