#pragma once
// The on-disk format of log segments and records (docs/STORAGE.md, "Files"), and the encoding
// and decoding of record payloads. Internal header.
//
// Everything is little-endian. A segment file is a 32-byte header followed by records; every
// record starts at a multiple of 8 bytes:
//
//   segment header (32 bytes)           record header (32 bytes)
//     0  magic "STKWAL\r\n"               0  u32 crc: CRC-32C of (payload ‖ padding ‖ bytes 4..31)
//     8  u32 version (1)                  4  u32 type (1 upsert, 2 delete)
//    12  u32 header bytes (32)            8  u64 seq
//    16  u64 first seq of the segment    16  u64 payload bytes (padding not counted)
//    24  u32 dim                         24  u64 offset of the group commit's first record
//    28  u32 CRC-32C of bytes 0..27      32  payload, then zeros up to a multiple of 8
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shardtopk/storage.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the log format is little-endian");

namespace shardtopk::storage {

inline constexpr char kSegmentMagic[8] = {'S', 'T', 'K', 'W', 'A', 'L', '\r', '\n'};
inline constexpr std::uint32_t kFormatVersion = 1;
inline constexpr std::size_t kSegmentHeaderBytes = 32;
inline constexpr std::size_t kRecordHeaderBytes = 32;
inline constexpr std::uint64_t kMaxPayloadBytes = 1ull << 40;
inline constexpr std::size_t kMaxAttributeName = 255;
inline constexpr std::int64_t kMaxDim = 65536;

inline constexpr std::uint64_t pad8(std::uint64_t n) { return (n + 7) & ~std::uint64_t{7}; }

struct SegmentHeader {
  std::uint64_t first_seq = 0;
  std::uint32_t dim = 0;
};

/// The 32 header bytes of a segment.
void encode_segment_header(const SegmentHeader& h, unsigned char out[kSegmentHeaderBytes]);
/// Parses and checks a segment header; "" on success, else the reason.
std::string decode_segment_header(const unsigned char* p, std::size_t n, SegmentHeader* h);

struct RecordHeader {
  std::uint32_t crc = 0;
  std::uint32_t type = 0;
  std::uint64_t seq = 0;
  std::uint64_t payload_bytes = 0;
  std::uint64_t batch_offset = 0;
};
RecordHeader read_record_header(const unsigned char* p);

/// CRC-32C of a record as stored: payload and padding first, then header bytes 4..31.
std::uint32_t record_crc(std::uint32_t payload_crc, const unsigned char* header);

/// A record ready to be written: header space + payload + padding in one 8-aligned buffer.
/// The payload's CRC is computed by the appender; seq and batch offset are filled in by the
/// writer (finish_record), which then completes the checksum over the header.
struct EncodedRecord {
  std::vector<std::uint64_t> buf;  // framed bytes, 8-aligned
  std::uint64_t framed_bytes = 0;  // header + payload + padding
  std::uint64_t payload_bytes = 0;
  WalRecordType type = WalRecordType::kUpsert;
  std::uint32_t payload_crc = 0;
  std::uint64_t seq = 0;

  unsigned char* bytes() { return reinterpret_cast<unsigned char*>(buf.data()); }
  const unsigned char* bytes() const { return reinterpret_cast<const unsigned char*>(buf.data()); }
};

/// Validates and encodes an upsert of rows of width `dim`. @throws Error (see Storage::upsert).
EncodedRecord encode_upsert(const UpsertRows& rows, std::int64_t dim, std::int64_t max_record_bytes);
/// Validates and encodes a delete. @throws Error.
EncodedRecord encode_delete(const std::int64_t* ids, std::int64_t n, std::int64_t max_record_bytes);
/// Fills in the header (seq, batch offset) and its checksum.
void finish_record(EncodedRecord& r, std::uint64_t seq, std::uint64_t batch_offset);

/// Decodes a checksummed payload into a view of it. @throws Error naming `where` when the
/// payload's structure is inconsistent (sizes, types, names).
WalRecord decode_record(const RecordHeader& h, const unsigned char* payload, const std::string& where);
/// decode_record of the record at `offset` of log segment `path`, whose errors name both ("log
/// segment '<path>' at offset <offset>: ..."); the text is built only when there is an error
/// (a replay decodes every record). @throws Error.
WalRecord decode_segment_record(const RecordHeader& h, const unsigned char* payload, const std::string& path,
                                std::uint64_t offset);

/// What a start-up's replay refuses in an upsert whose structure is sound, and the service
/// never writes: a value that is not finite, an id given twice, the reserved id kPadId, a NaN
/// float64 attribute (`storage verify` checks every record for them; a replay refuses them
/// where it applies the record). @throws Error naming `where`, the record, the row and the value.
void check_record_values(const WalRecord& r, const std::string& where);

/// Checks an attribute column name (1..255 bytes, no '/' or NUL). @throws Error naming `what`.
void check_attribute_name(const std::string& name, const std::string& what);

}  // namespace shardtopk::storage
