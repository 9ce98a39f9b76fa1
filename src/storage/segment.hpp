#pragma once
// Reading log segments: naming, and the record-by-record scan that verifies every checksum and
// sequence number and tells a torn tail from damage in the middle. Internal header.
#include <cstdint>
#include <functional>
#include <string>

#include "storage/format.hpp"

namespace shardtopk::storage {

/// "wal-<first seq, 20 digits>.log".
std::string segment_name(std::uint64_t first_seq);
/// Parses a segment file name; false when `name` is not one.
bool parse_segment_name(const std::string& name, std::uint64_t* first_seq);

/// What scan_segment found.
struct SegmentScan {
  SegmentHeader header;
  std::uint64_t end = 0;         ///< offset just past the last whole record (≥ header size)
  std::uint64_t size = 0;        ///< bytes scanned
  std::int64_t records = 0;      ///< whole records in [header, end)
  std::uint64_t last_seq = 0;    ///< seq of the last whole record; header.first_seq - 1 when none
  std::string tail_reason;       ///< why the bytes in [end, size) are not a record ("" when end == size)
  std::int64_t tail_records = 0; ///< records that began in [end, size): the torn one + whole ones after it
};

/// Called for each whole, verified record: its header, the record decoded (views into the
/// scanned bytes, decoded once by the scan's structure check) and its offset in the file.
using RecordFn = std::function<void(const RecordHeader&, const WalRecord& record, std::uint64_t offset)>;

/// Scans the `size` bytes at `data` (segment `path`): the header, then records whose seqs count
/// up by one from the header's first seq, each checked (length, checksum, payload structure).
///
/// Where the bytes stop forming a whole, checksummed record at offset X, the rest is a torn
/// tail when `allow_torn_tail` and no valid record after X belongs to a later group commit
/// (its batch offset is past X); the result then says where the tail starts. A crash can only
/// tear the last group commit (each one is fdatasynced before the next is written), so a later
/// group commit's record after X means the log is damaged in the middle.
/// @throws Error naming the file and offset on a bad header, a damaged record followed by a
///   later group commit's records, any bad record when !allow_torn_tail, a whole record with a
///   wrong seq, or a checksummed payload whose structure is inconsistent.
SegmentScan scan_segment(const std::string& path, const unsigned char* data, std::uint64_t size,
                         bool allow_torn_tail, const RecordFn& fn);

}  // namespace shardtopk::storage
