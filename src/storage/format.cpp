#include "storage/format.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "shardtopk/error.hpp"
#include "shardtopk/ordering.hpp"
#include "storage/crc32c.hpp"

namespace shardtopk::storage {
namespace {
// An attribute's type as the log stores it (docs/STORAGE.md, "Record payloads").
constexpr std::uint32_t kAttributeCodeInt64 = 1, kAttributeCodeFloat64 = 2;
std::uint32_t attribute_code(AttributeType t) {
  return t == AttributeType::kInt64 ? kAttributeCodeInt64 : kAttributeCodeFloat64;
}
}  // namespace

namespace {

template <class T>
void put(unsigned char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}
template <class T>
T get(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Upsert payload: u64 rows, u32 dim, u32 attribute count, i64 ids [rows], f32 vectors
// [rows, dim] (zero-padded to 8), then per attribute: u32 name bytes, u32 type, the name
// (zero-padded to 8), 8-byte values [rows]. Delete payload: u64 rows, i64 ids [rows].
constexpr std::uint64_t kUpsertFixed = 16;
constexpr std::uint64_t kDeleteFixed = 8;

EncodedRecord allocate(WalRecordType type, std::uint64_t payload_bytes, std::int64_t max_record_bytes) {
  SHARDTOPK_EXPECTS(payload_bytes <= static_cast<std::uint64_t>(max_record_bytes) && payload_bytes <= kMaxPayloadBytes,
                    "storage: record of ", payload_bytes, " bytes is larger than the limit of ", max_record_bytes,
                    " bytes (max_record_bytes): split the request");
  EncodedRecord r;
  r.type = type;
  r.payload_bytes = payload_bytes;
  r.framed_bytes = kRecordHeaderBytes + pad8(payload_bytes);
  r.buf.assign(r.framed_bytes / 8, 0);  // zeroed: the padding is written as zeros
  return r;
}

void seal_payload(EncodedRecord& r) {
  r.payload_crc = crc32c(r.bytes() + kRecordHeaderBytes, r.framed_bytes - kRecordHeaderBytes);
}

}  // namespace

void encode_segment_header(const SegmentHeader& h, unsigned char out[kSegmentHeaderBytes]) {
  std::memset(out, 0, kSegmentHeaderBytes);
  std::memcpy(out, kSegmentMagic, 8);
  put<std::uint32_t>(out + 8, kFormatVersion);
  put<std::uint32_t>(out + 12, static_cast<std::uint32_t>(kSegmentHeaderBytes));
  put<std::uint64_t>(out + 16, h.first_seq);
  put<std::uint32_t>(out + 24, h.dim);
  put<std::uint32_t>(out + 28, crc32c(out, 28));
}

std::string decode_segment_header(const unsigned char* p, std::size_t n, SegmentHeader* h) {
  if (n < kSegmentHeaderBytes) return "file shorter than the " + std::to_string(kSegmentHeaderBytes) + "-byte header";
  if (std::memcmp(p, kSegmentMagic, 8) != 0) return "not a shardtopk log segment (bad magic)";
  if (get<std::uint32_t>(p + 28) != crc32c(p, 28)) return "segment header checksum mismatch";
  const auto version = get<std::uint32_t>(p + 8);
  if (version != kFormatVersion)
    return "segment format version " + std::to_string(version) + " (this build reads " +
           std::to_string(kFormatVersion) + ")";
  if (get<std::uint32_t>(p + 12) != kSegmentHeaderBytes) return "unexpected segment header size";
  h->first_seq = get<std::uint64_t>(p + 16);
  h->dim = get<std::uint32_t>(p + 24);
  return "";
}

RecordHeader read_record_header(const unsigned char* p) {
  RecordHeader h;
  h.crc = get<std::uint32_t>(p);
  h.type = get<std::uint32_t>(p + 4);
  h.seq = get<std::uint64_t>(p + 8);
  h.payload_bytes = get<std::uint64_t>(p + 16);
  h.batch_offset = get<std::uint64_t>(p + 24);
  return h;
}

std::uint32_t record_crc(std::uint32_t payload_crc, const unsigned char* header) {
  return crc32c_extend(payload_crc, header + 4, kRecordHeaderBytes - 4);
}

void check_attribute_name(const std::string& name, const std::string& what) {
  SHARDTOPK_EXPECTS(!name.empty() && name.size() <= kMaxAttributeName, what, ": attribute name '", name,
                    "' must be 1 .. ", kMaxAttributeName, " bytes");
  SHARDTOPK_EXPECTS(name.find('/') == std::string::npos && name.find('\0') == std::string::npos, what,
                    ": attribute name '", name, "' must not contain '/' or NUL");
}

EncodedRecord encode_upsert(const UpsertRows& u, std::int64_t dim, std::int64_t max_record_bytes) {
  SHARDTOPK_EXPECTS(u.rows >= 1, "upsert: rows = ", u.rows, " (must be ≥ 1)");
  SHARDTOPK_EXPECTS(u.ids != nullptr && u.vectors != nullptr, "upsert: ids or vectors is null for ", u.rows, " rows");
  SHARDTOPK_EXPECTS(u.rows <= static_cast<std::int64_t>(kMaxPayloadBytes / 8), "upsert: rows = ", u.rows,
                    " is too many");
  const auto rows = static_cast<std::uint64_t>(u.rows);
  const auto values = rows * static_cast<std::uint64_t>(dim);
  std::set<std::string> names;
  std::uint64_t bytes = kUpsertFixed + 8 * rows + pad8(4 * values);
  for (const auto& a : u.attributes) {
    check_attribute_name(a.name, "upsert");
    SHARDTOPK_EXPECTS(names.insert(a.name).second, "upsert: attribute '", a.name, "' given twice");
    SHARDTOPK_EXPECTS(a.type == AttributeType::kInt64 || a.type == AttributeType::kFloat64, "upsert: attribute '",
                      a.name, "' has unknown type ", static_cast<unsigned>(a.type));
    SHARDTOPK_EXPECTS(a.data != nullptr, "upsert: attribute '", a.name, "' has no data");
    bytes += 8 + pad8(a.name.size()) + 8 * rows;
  }
  for (std::uint64_t i = 0; i < values; ++i)
    if (!std::isfinite(u.vectors[i]))
      SHARDTOPK_EXPECTS(false, "upsert: row ", i / static_cast<std::uint64_t>(dim), " (id ",
                        u.ids[i / static_cast<std::uint64_t>(dim)], ") column ", i % static_cast<std::uint64_t>(dim),
                        " is ", u.vectors[i], " (values must be finite)");

  EncodedRecord r = allocate(WalRecordType::kUpsert, bytes, max_record_bytes);
  unsigned char* p = r.bytes() + kRecordHeaderBytes;
  put<std::uint64_t>(p, rows);
  put<std::uint32_t>(p + 8, static_cast<std::uint32_t>(dim));
  put<std::uint32_t>(p + 12, static_cast<std::uint32_t>(u.attributes.size()));
  p += kUpsertFixed;
  std::memcpy(p, u.ids, 8 * rows);
  p += 8 * rows;
  std::memcpy(p, u.vectors, 4 * values);
  p += pad8(4 * values);
  for (const auto& a : u.attributes) {
    put<std::uint32_t>(p, static_cast<std::uint32_t>(a.name.size()));
    put<std::uint32_t>(p + 4, attribute_code(a.type));
    std::memcpy(p + 8, a.name.data(), a.name.size());
    p += 8 + pad8(a.name.size());
    std::memcpy(p, a.data, 8 * rows);
    p += 8 * rows;
  }
  seal_payload(r);
  return r;
}

EncodedRecord encode_delete(const std::int64_t* ids, std::int64_t n, std::int64_t max_record_bytes) {
  SHARDTOPK_EXPECTS(n >= 1, "delete: ", n, " ids (must be ≥ 1)");
  SHARDTOPK_EXPECTS(ids != nullptr, "delete: ids is null for ", n, " ids");
  SHARDTOPK_EXPECTS(n <= static_cast<std::int64_t>(kMaxPayloadBytes / 8), "delete: ", n, " ids is too many");
  const auto rows = static_cast<std::uint64_t>(n);
  EncodedRecord r = allocate(WalRecordType::kDelete, kDeleteFixed + 8 * rows, max_record_bytes);
  unsigned char* p = r.bytes() + kRecordHeaderBytes;
  put<std::uint64_t>(p, rows);
  std::memcpy(p + kDeleteFixed, ids, 8 * rows);
  seal_payload(r);
  return r;
}

void finish_record(EncodedRecord& r, std::uint64_t seq, std::uint64_t batch_offset) {
  unsigned char* h = r.bytes();
  r.seq = seq;
  put<std::uint32_t>(h + 4, static_cast<std::uint32_t>(r.type));
  put<std::uint64_t>(h + 8, seq);
  put<std::uint64_t>(h + 16, r.payload_bytes);
  put<std::uint64_t>(h + 24, batch_offset);
  put<std::uint32_t>(h, record_crc(r.payload_crc, h));
}

WalRecord decode_record(const RecordHeader& h, const unsigned char* p, const std::string& where) {
  WalRecord r;
  r.seq = h.seq;
  const std::uint64_t n = h.payload_bytes;
  auto need = [&](std::uint64_t at, std::uint64_t len) {
    SHARDTOPK_EXPECTS(at <= n && len <= n - at, where, ": record seq ", h.seq, " payload of ", n,
                      " bytes is inconsistent (needs bytes ", at, " .. ", at + len, ")");
  };
  if (h.type == static_cast<std::uint32_t>(WalRecordType::kDelete)) {
    r.type = WalRecordType::kDelete;
    need(0, kDeleteFixed);
    const auto rows = get<std::uint64_t>(p);
    SHARDTOPK_EXPECTS(rows >= 1 && rows <= (n - kDeleteFixed) / 8 && kDeleteFixed + 8 * rows == n, where,
                      ": delete record seq ", h.seq, " claims ", rows, " ids in ", n, " bytes");
    r.rows = static_cast<std::int64_t>(rows);
    r.ids = reinterpret_cast<const std::int64_t*>(p + kDeleteFixed);
    return r;
  }
  SHARDTOPK_EXPECTS(h.type == static_cast<std::uint32_t>(WalRecordType::kUpsert), where, ": record seq ", h.seq,
                    " has unknown type ", h.type);
  r.type = WalRecordType::kUpsert;
  need(0, kUpsertFixed);
  const auto rows = get<std::uint64_t>(p);
  const auto dim = get<std::uint32_t>(p + 8);
  const auto nattr = get<std::uint32_t>(p + 12);
  SHARDTOPK_EXPECTS(rows >= 1 && rows <= n / 8 && dim >= 1 && dim <= kMaxDim, where, ": upsert record seq ", h.seq,
                    " claims ", rows, " rows of dim ", dim);
  std::uint64_t at = kUpsertFixed;
  need(at, 8 * rows);
  r.rows = static_cast<std::int64_t>(rows);
  r.dim = dim;
  r.ids = reinterpret_cast<const std::int64_t*>(p + at);
  at += 8 * rows;
  const std::uint64_t vec_bytes = 4 * rows * dim;
  need(at, vec_bytes);
  r.vectors = reinterpret_cast<const float*>(p + at);
  at += vec_bytes;
  at = pad8(at);
  std::set<std::string> names;
  for (std::uint32_t k = 0; k < nattr; ++k) {
    need(at, 8);
    const auto len = get<std::uint32_t>(p + at);
    const auto type = get<std::uint32_t>(p + at + 4);
    SHARDTOPK_EXPECTS(len >= 1 && len <= kMaxAttributeName, where, ": record seq ", h.seq, " attribute ", k,
                      " has a name of ", len, " bytes");
    need(at + 8, pad8(len) + 8 * rows);
    AttributeColumnView a;
    a.name.assign(reinterpret_cast<const char*>(p + at + 8), len);
    check_attribute_name(a.name, where);
    SHARDTOPK_EXPECTS(names.insert(a.name).second, where, ": record seq ", h.seq, " repeats attribute '", a.name, "'");
    SHARDTOPK_EXPECTS(type == kAttributeCodeInt64 || type == kAttributeCodeFloat64, where, ": record seq ", h.seq,
                      " attribute '", a.name, "' has unknown type ", type);
    a.type = type == kAttributeCodeInt64 ? AttributeType::kInt64 : AttributeType::kFloat64;
    at += 8 + pad8(len);
    a.data = p + at;
    at += 8 * rows;
    r.attributes.push_back(std::move(a));
  }
  SHARDTOPK_EXPECTS(at == n, where, ": upsert record seq ", h.seq,
                    at < n ? detail::concat(" has ", n - at, " unexplained payload bytes")
                           : detail::concat("'s payload of ", n, " bytes is shorter than its rows need (", at, ")"));
  return r;
}

void check_record_values(const WalRecord& r, const std::string& where) {
  if (r.type != WalRecordType::kUpsert) return;
  const auto rows = static_cast<std::size_t>(r.rows), dim = static_cast<std::size_t>(r.dim);
  std::vector<std::int64_t> ids(rows);
  std::memcpy(ids.data(), r.ids, 8 * rows);
  for (std::size_t i = 0; i < rows; ++i)
    SHARDTOPK_EXPECTS(ids[i] != kPadId, where, ": upsert record seq ", r.seq, " row ", i, " has the reserved id ", kPadId);
  for (std::size_t i = 0; i < rows * dim; ++i) {
    float v;
    std::memcpy(&v, reinterpret_cast<const unsigned char*>(r.vectors) + 4 * i, 4);
    SHARDTOPK_EXPECTS(std::isfinite(v), where, ": upsert record seq ", r.seq, " row ", i / dim, " (id ", ids[i / dim],
                      ") column ", i % dim, " is ", v, " (values must be finite)");
  }
  for (const AttributeColumnView& a : r.attributes) {
    if (a.type != AttributeType::kFloat64) continue;
    for (std::size_t i = 0; i < rows; ++i) {
      double v;
      std::memcpy(&v, static_cast<const unsigned char*>(a.data) + 8 * i, 8);
      SHARDTOPK_EXPECTS(!std::isnan(v), where, ": upsert record seq ", r.seq, " row ", i, " (id ", ids[i],
                        ") attribute '", a.name, "' is NaN");
    }
  }
  std::vector<std::int64_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  SHARDTOPK_EXPECTS(twice == sorted.end(), where, ": upsert record seq ", r.seq, " gives id ",
                    twice == sorted.end() ? 0 : *twice, " twice");
}

WalRecord decode_segment_record(const RecordHeader& h, const unsigned char* payload, const std::string& path,
                                std::uint64_t offset) {
  try {
    return decode_record(h, payload, "");  // every message starts with `where`
  } catch (const Error& e) {
    throw Error(detail::concat("log segment '", path, "' at offset ", offset, e.what()));
  }
}

}  // namespace shardtopk::storage
